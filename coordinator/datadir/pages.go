package datadir

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
)

// bbolt's page layout (go.etcd.io/bbolt internal/common/page.go): after
// the 16-byte header come count elements of 16 bytes; a branch element is
// (pos, ksize uint32, pgid uint64), a leaf element (flags, pos, ksize,
// vsize uint32); pos counts from the element itself. A leaf element with
// the bucket flag holds a bucket: its 16-byte header (root pgid,
// sequence) and, when root is 0, an inline leaf page.
const (
	branchFlag     = 0x01
	leafFlag       = 0x02
	bucketLeafFlag = 0x01
	elementSize    = 16
	bucketHeader   = 16
	maxDepth       = 64
)

// pageWalker checks the tree of pages reachable from a bbolt file's root
// bucket with plain, bounds-checked reads, so that no pointer bbolt
// follows later can leave the file: page IDs and types, overflow within
// the file, every element inside its page, keys in order, no page
// referenced twice, and every page either reachable or free. bbolt's own
// Check walks the same tree through its memory map on a goroutine of its
// own, where a bad offset is a fault no recover catches; it runs only
// after this walk passed.
type pageWalker struct {
	f        io.ReaderAt
	meta     boltMeta
	seen     map[uint64]bool
	problems []string
}

func (w *pageWalker) fail(format string, args ...any) {
	if len(w.problems) < maxCheckReports {
		w.problems = append(w.problems, fmt.Sprintf(format, args...))
	}
}

// walkPages checks the tree under the root bucket and the freelist's
// disjointness from it. free lists the freelist's pages.
func walkPages(f io.ReaderAt, m boltMeta, rootPgid uint64, free []uint64) []string {
	w := &pageWalker{f: f, meta: m, seen: map[uint64]bool{0: true, 1: true}}
	if m.freelist != noFreelist {
		p, err := w.read(m.freelist)
		if err != nil {
			w.fail("%v", err)
			return w.problems
		}
		for i := uint64(0); i <= p.overflow; i++ {
			w.seen[m.freelist+i] = true
		}
	}
	w.page(rootPgid, 0)
	if len(w.problems) > 0 {
		return w.problems
	}
	freed := map[uint64]bool{}
	for _, id := range free {
		switch {
		case freed[id]:
			w.fail("page %d is freed twice", id)
		case w.seen[id]:
			w.fail("page %d is both in use and free", id)
		}
		freed[id] = true
	}
	if m.freelist == noFreelist {
		return w.problems // free pages are not recorded: nothing to compare
	}
	for id := uint64(0); id < m.pgid; id++ {
		if !w.seen[id] && !freed[id] {
			w.fail("page %d is neither in use nor free", id)
		}
	}
	return w.problems
}

// rawPage is one page (with its overflow pages) read from the file.
type rawPage struct {
	id       uint64
	flags    uint16
	count    int
	overflow uint64
	buf      []byte // the whole page, header included
}

// read reads page id and its overflow pages, checking the header.
func (w *pageWalker) read(id uint64) (rawPage, error) {
	ps := uint64(w.meta.pageSize)
	if id < 2 || id >= w.meta.pgid {
		return rawPage{}, fmt.Errorf("a reference to page %d, outside pages 2 to %d", id, w.meta.pgid-1)
	}
	hdr := make([]byte, pageHeaderSize)
	if _, err := w.f.ReadAt(hdr, int64(id*ps)); err != nil {
		return rawPage{}, fmt.Errorf("reading page %d: %v", id, err)
	}
	le := binary.LittleEndian
	p := rawPage{id: le.Uint64(hdr), flags: le.Uint16(hdr[8:]), count: int(le.Uint16(hdr[10:])), overflow: uint64(le.Uint32(hdr[12:]))}
	if p.id != id {
		return rawPage{}, fmt.Errorf("page %d's header says it is page %d", id, p.id)
	}
	if id+p.overflow >= w.meta.pgid {
		return rawPage{}, fmt.Errorf("page %d overflows %d pages past the last page %d", id, p.overflow, w.meta.pgid-1)
	}
	p.buf = make([]byte, (p.overflow+1)*ps)
	if _, err := w.f.ReadAt(p.buf, int64(id*ps)); err != nil {
		return rawPage{}, fmt.Errorf("reading page %d: %v", id, err)
	}
	return p, nil
}

// page checks page id, a node of a bucket's tree, and its children.
func (w *pageWalker) page(id uint64, depth int) {
	if len(w.problems) > 0 {
		return
	}
	if depth > maxDepth {
		w.fail("page %d lies deeper than %d levels: a cycle", id, maxDepth)
		return
	}
	p, err := w.read(id)
	if err != nil {
		w.fail("%v", err)
		return
	}
	for i := uint64(0); i <= p.overflow; i++ {
		if w.seen[id+i] {
			w.fail("page %d is referenced twice", id+i)
			return
		}
		w.seen[id+i] = true
	}
	switch p.flags {
	case branchFlag:
		w.branch(p, depth)
	case leafFlag:
		w.leaf(p.buf, p.count, fmt.Sprintf("page %d", id), depth)
	default:
		w.fail("page %d is in a bucket's tree but has page type flags %#x", id, p.flags)
	}
}

func (w *pageWalker) branch(p rawPage, depth int) {
	le := binary.LittleEndian
	if p.count == 0 || pageHeaderSize+p.count*elementSize > len(p.buf) {
		w.fail("branch page %d claims %d elements, which do not fit it", p.id, p.count)
		return
	}
	var prev []byte
	for i := 0; i < p.count; i++ {
		at := pageHeaderSize + i*elementSize
		pos, ksize, child := int(le.Uint32(p.buf[at:])), int(le.Uint32(p.buf[at+4:])), le.Uint64(p.buf[at+8:])
		key, ok := slice(p.buf, at+pos, ksize)
		if !ok {
			w.fail("branch page %d, element %d: its key lies outside the page", p.id, i)
			return
		}
		if i > 0 && bytes.Compare(prev, key) >= 0 {
			w.fail("branch page %d, element %d: keys out of order", p.id, i)
			return
		}
		prev = key
		w.page(child, depth+1)
	}
}

// leaf checks a leaf page's elements (buf holds the page, header
// included) and the buckets they hold.
func (w *pageWalker) leaf(buf []byte, count int, where string, depth int) {
	le := binary.LittleEndian
	if pageHeaderSize+count*elementSize > len(buf) {
		w.fail("leaf %s claims %d elements, which do not fit it", where, count)
		return
	}
	var prev []byte
	for i := 0; i < count; i++ {
		at := pageHeaderSize + i*elementSize
		flags, pos, ksize, vsize := le.Uint32(buf[at:]), int(le.Uint32(buf[at+4:])), int(le.Uint32(buf[at+8:])), int(le.Uint32(buf[at+12:]))
		key, ok1 := slice(buf, at+pos, ksize)
		value, ok2 := slice(buf, at+pos+ksize, vsize)
		if !ok1 || !ok2 {
			w.fail("leaf %s, element %d: its key or value lies outside the page", where, i)
			return
		}
		if i > 0 && bytes.Compare(prev, key) >= 0 {
			w.fail("leaf %s, element %d: keys out of order", where, i)
			return
		}
		prev = key
		if flags&bucketLeafFlag == 0 {
			continue
		}
		if len(value) < bucketHeader {
			w.fail("leaf %s, element %d: a bucket of %d bytes", where, i, len(value))
			return
		}
		if root := le.Uint64(value); root != 0 {
			w.page(root, depth+1)
			continue
		}
		inline := value[bucketHeader:]
		if len(inline) < pageHeaderSize {
			w.fail("leaf %s, element %d: an inline bucket of %d bytes", where, i, len(inline))
			return
		}
		if f := le.Uint16(inline[8:]); f != leafFlag {
			w.fail("leaf %s, element %d: an inline bucket whose page type flags are %#x", where, i, f)
			return
		}
		w.leaf(inline, int(le.Uint16(inline[10:])), fmt.Sprintf("%s's inline bucket %q", where, key), depth+1)
	}
}

// slice returns b[at:at+n] if it lies inside b.
func slice(b []byte, at, n int) ([]byte, bool) {
	if at < 0 || n < 0 || at > len(b) || n > len(b)-at {
		return nil, false
	}
	return b[at : at+n], true
}
