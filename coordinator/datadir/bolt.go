package datadir

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// The parts of bbolt's on-disk format the check reads without mapping the
// file (go.etcd.io/bbolt internal/common: page.go, meta.go). Pages start
// with a 16-byte header (id, flags, count, overflow); page 0 and page 1
// each hold a meta, whose checksum is FNV-64a over its first 56 bytes.
// The file is written in the machine's byte order; bbolt supports only
// little-endian machines in practice, and so does this check.
const (
	boltMagic       = 0xED0CDAED
	boltVersion     = 2
	pageHeaderSize  = 16
	metaSize        = 64
	metaSumLen      = 56
	noFreelist      = ^uint64(0)
	metaFlag        = 0x04
	freelistFlag    = 0x10
	minPageSize     = 512
	maxPageSize     = 1 << 16
	raftLogsBucket  = "logs"
	raftConfBucket  = "conf"
	maxCheckReports = 3
)

// boltMeta is what the check reads of a meta page.
type boltMeta struct {
	pageSize uint32
	root     uint64 // the root bucket's page
	freelist uint64
	pgid     uint64 // the high-water mark: pages [0, pgid) are in the file
	txid     uint64
}

// readBoltMeta decodes the meta at off, or says why it is not valid.
func readBoltMeta(f io.ReaderAt, off int64) (boltMeta, error) {
	b := make([]byte, metaSize)
	if _, err := f.ReadAt(b, off); err != nil {
		return boltMeta{}, fmt.Errorf("reading the meta page at offset %d: %w", off, err)
	}
	le := binary.LittleEndian
	switch {
	case le.Uint32(b[0:]) != boltMagic:
		return boltMeta{}, errors.New("not a bbolt meta page (bad magic)")
	case le.Uint32(b[4:]) != boltVersion:
		return boltMeta{}, fmt.Errorf("bbolt format version %d, want %d", le.Uint32(b[4:]), boltVersion)
	}
	h := fnv.New64a()
	h.Write(b[:metaSumLen])
	if h.Sum64() != le.Uint64(b[metaSumLen:]) {
		return boltMeta{}, errors.New("meta page checksum mismatch")
	}
	m := boltMeta{pageSize: le.Uint32(b[8:]), root: le.Uint64(b[16:]), freelist: le.Uint64(b[32:]), pgid: le.Uint64(b[40:]), txid: le.Uint64(b[48:])}
	if m.pageSize < minPageSize || m.pageSize > maxPageSize || m.pageSize&(m.pageSize-1) != 0 {
		return boltMeta{}, fmt.Errorf("page size %d is not a power of two from %d to %d", m.pageSize, minPageSize, maxPageSize)
	}
	if m.pgid < 2 {
		return boltMeta{}, fmt.Errorf("page count %d is below the two meta pages", m.pgid)
	}
	return m, nil
}

// checkBoltLayout reads a bbolt file's meta and freelist pages with plain
// reads and checks that every page they promise lies inside the file, so
// that mapping the file afterwards cannot fault. It returns the meta bbolt
// will use, the one with the higher transaction ID, and the free pages.
func checkBoltLayout(f *os.File, size int64) (boltMeta, []uint64, string) {
	if size < pageHeaderSize+metaSize {
		return boltMeta{}, nil, fmt.Sprintf("truncated: %d bytes, too short for a bbolt header", size)
	}
	m0, err0 := readBoltMeta(f, pageHeaderSize)
	second := int64(os.Getpagesize())
	if err0 == nil {
		second = int64(m0.pageSize)
	}
	var m1 boltMeta
	err1 := fmt.Errorf("truncated: %d bytes, the second meta page is missing", size)
	if size >= second+pageHeaderSize+metaSize {
		m1, err1 = readBoltMeta(f, second+pageHeaderSize)
	}
	// A meta page that fails its check is refused even when the other
	// is good: bbolt would fall back to the other, the older transaction,
	// and forget the newer one's write, which Raft may have acknowledged
	// (an entry, a term, a vote).
	switch {
	case err0 != nil && err1 != nil:
		return boltMeta{}, nil, fmt.Sprintf("neither meta page is valid (page 0: %v; page 1: %v)", err0, err1)
	case err0 != nil:
		return boltMeta{}, nil, fmt.Sprintf("meta page 0 is not valid (%v): a damaged or torn write", err0)
	case err1 != nil:
		return boltMeta{}, nil, fmt.Sprintf("meta page 1 is not valid (%v): a damaged or torn write", err1)
	case m0.pageSize != m1.pageSize:
		return boltMeta{}, nil, fmt.Sprintf("the meta pages disagree on the page size (%d and %d)", m0.pageSize, m1.pageSize)
	}
	m := m0
	if m1.txid > m0.txid {
		m = m1
	}
	ps := int64(m.pageSize)
	if want := int64(m.pgid) * ps; size < want {
		return boltMeta{}, nil, fmt.Sprintf("truncated: %d bytes, but its %d pages of %d bytes need %d", size, m.pgid, ps, want)
	}
	le := binary.LittleEndian
	hdr := make([]byte, pageHeaderSize+8)
	for id := uint64(0); id < 2; id++ {
		if _, err := f.ReadAt(hdr[:pageHeaderSize], int64(id)*ps); err != nil {
			return boltMeta{}, nil, fmt.Sprintf("reading page %d: %v", id, err)
		}
		if got, flags := le.Uint64(hdr), le.Uint16(hdr[8:]); got != id || flags != metaFlag {
			return boltMeta{}, nil, fmt.Sprintf("page %d should be a meta page but its header says page %d, flags %#x", id, got, flags)
		}
	}
	if m.freelist == noFreelist {
		return m, nil, ""
	}
	if m.freelist < 2 || m.freelist >= m.pgid {
		return boltMeta{}, nil, fmt.Sprintf("the freelist is at page %d, outside pages 2 to %d", m.freelist, m.pgid-1)
	}
	if _, err := f.ReadAt(hdr, int64(m.freelist)*ps); err != nil {
		return boltMeta{}, nil, fmt.Sprintf("reading the freelist page %d: %v", m.freelist, err)
	}
	if got := le.Uint64(hdr); got != m.freelist {
		return boltMeta{}, nil, fmt.Sprintf("page %d should hold the freelist but its header says page %d", m.freelist, got)
	}
	flags, count, overflow := le.Uint16(hdr[8:]), uint64(le.Uint16(hdr[10:])), uint64(le.Uint32(hdr[12:]))
	if flags != freelistFlag {
		return boltMeta{}, nil, fmt.Sprintf("page %d should hold the freelist but has page type flags %#x", m.freelist, flags)
	}
	if m.freelist+overflow >= m.pgid {
		return boltMeta{}, nil, fmt.Sprintf("the freelist at page %d runs %d pages past the last page %d", m.freelist, overflow, m.pgid-1)
	}
	first := uint64(0)
	if count == 0xFFFF { // the count is the first element
		count, first = le.Uint64(hdr[pageHeaderSize:]), 1
	}
	if room := (uint64(overflow+1)*uint64(ps) - pageHeaderSize) / 8; count > room || first+count > room {
		return boltMeta{}, nil, fmt.Sprintf("the freelist at page %d claims %d pages, more than its %d pages hold", m.freelist, count, overflow+1)
	}
	raw := make([]byte, 8*count)
	if _, err := f.ReadAt(raw, int64(m.freelist)*ps+pageHeaderSize+int64(8*first)); err != nil {
		return boltMeta{}, nil, fmt.Sprintf("reading the freelist: %v", err)
	}
	free := make([]uint64, count)
	for i := range free {
		if free[i] = le.Uint64(raw[8*i:]); free[i] < 2 || free[i] >= m.pgid {
			return boltMeta{}, nil, fmt.Sprintf("the freelist names page %d, outside pages 2 to %d", free[i], m.pgid-1)
		}
	}
	return m, free, ""
}

// storeInfo is what the check read of a Raft store: its log's span,
// indexes first to last (both 0 when the log is empty), and its current
// term.
type storeInfo struct{ first, last, term uint64 }

// checkRaftStore checks a raft.db that is not empty: its layout, then
// every page reachable from its buckets, bbolt's consistency check, the
// stable store's values and every log entry, which checkEntry decodes.
// It returns the log's span, or the problem. A panic or a memory fault in
// bbolt while it reads is reported as a problem, not a crash.
func checkRaftStore(path string, lockWait time.Duration, covered uint64, checkEntry func(*raft.Log) error) (storeInfo, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return storeInfo{}, "", err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return storeInfo{}, "", err
	}
	m, free, problem := checkBoltLayout(f, st.Size())
	if problem == "" {
		if problems := walkPages(f, m, m.root, free); len(problems) > 0 {
			problem = strings.Join(problems, "; ")
		}
	}
	f.Close()
	if problem != "" {
		return storeInfo{}, problem, nil
	}
	type result struct {
		span    storeInfo
		problem string
		err     error
	}
	done := make(chan result, 1)
	go func() {
		// Faults on mapped memory panic on this goroutine instead of
		// killing the process, and the panic is reported.
		debug.SetPanicOnFault(true)
		var r result
		defer func() {
			if p := recover(); p != nil {
				r = result{problem: fmt.Sprintf("bbolt failed reading it: %v", p)}
			}
			done <- r
		}()
		if r.problem, r.err = walkBolt(path, lockWait); r.problem != "" || r.err != nil {
			return
		}
		r.span, r.problem, r.err = scanLog(path, lockWait, covered, checkEntry)
	}()
	r := <-done
	return r.span, r.problem, r.err
}

// errInUse is returned when another process holds raft.db's lock.
var errInUse = errors.New("in use")

// walkBolt opens the file read-only, reads every key and value of every
// bucket (which touches every reachable page), checks the Raft store's
// two buckets, and runs bbolt's consistency check.
func walkBolt(path string, lockWait time.Duration) (string, error) {
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: lockWait})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return "", errInUse
	}
	if err != nil {
		return fmt.Sprintf("bbolt cannot open it: %v", err), nil
	}
	defer db.Close()
	var problem string
	err = db.View(func(tx *bbolt.Tx) error {
		var walk func(b *bbolt.Bucket, name string) error
		walk = func(b *bbolt.Bucket, name string) error {
			return b.ForEach(func(k, v []byte) error {
				if v == nil {
					if sub := b.Bucket(k); sub != nil {
						return walk(sub, name+"/"+string(k))
					}
				}
				return nil
			})
		}
		if err := tx.ForEach(func(name []byte, b *bbolt.Bucket) error { return walk(b, string(name)) }); err != nil {
			return err
		}
		logs, conf := tx.Bucket([]byte(raftLogsBucket)), tx.Bucket([]byte(raftConfBucket))
		if logs == nil || conf == nil {
			problem = fmt.Sprintf("not a Raft store: the %q and %q buckets are missing", raftLogsBucket, raftConfBucket)
			return nil
		}
		if err := logs.ForEach(func(k, _ []byte) error {
			if len(k) != 8 {
				return fmt.Errorf("a log key of %d bytes, want 8", len(k))
			}
			return nil
		}); err != nil {
			problem = err.Error()
			return nil
		}
		for _, key := range []string{"CurrentTerm", "LastVoteTerm"} {
			if v := conf.Get([]byte(key)); v != nil && len(v) != 8 {
				problem = fmt.Sprintf("the stable store's %s is %d bytes, want 8", key, len(v))
				return nil
			}
		}
		var errs []string
		for err := range tx.Check() {
			if len(errs) < maxCheckReports {
				errs = append(errs, err.Error())
			}
		}
		if len(errs) > 0 {
			problem = fmt.Sprintf("bbolt's consistency check failed: %v", errs)
		}
		return nil
	})
	if err != nil && problem == "" {
		problem = fmt.Sprintf("reading it: %v", err)
	}
	return problem, nil
}

// scanLog reads every log entry through raft-boltdb, as Raft will, and
// checks that the indexes after covered (the snapshot Raft restores) run
// without a gap and that each command decodes. Entries up to covered may
// be missing: Raft leaves the index of a restored snapshot without one.
func scanLog(path string, lockWait time.Duration, covered uint64, checkEntry func(*raft.Log) error) (storeInfo, string, error) {
	store, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: &bbolt.Options{ReadOnly: true, Timeout: lockWait}})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return storeInfo{}, "", errInUse
	}
	if err != nil {
		return storeInfo{}, fmt.Sprintf("raft-boltdb cannot open it: %v", err), nil
	}
	defer store.Close()
	var span storeInfo
	if span.first, err = store.FirstIndex(); err != nil {
		return storeInfo{}, fmt.Sprintf("reading the first log index: %v", err), nil
	}
	if span.last, err = store.LastIndex(); err != nil {
		return storeInfo{}, fmt.Sprintf("reading the last log index: %v", err), nil
	}
	for _, key := range []string{"CurrentTerm", "LastVoteTerm"} {
		v, err := store.GetUint64([]byte(key))
		if err != nil && !errors.Is(err, raftboltdb.ErrKeyNotFound) {
			return storeInfo{}, fmt.Sprintf("the stable store's %s: %v", key, err), nil
		}
		if key == "CurrentTerm" {
			span.term = v
		}
	}
	if span.last == 0 {
		return span, "", nil
	}
	var l raft.Log
	for i := span.first; i <= span.last; i++ {
		if err := store.GetLog(i, &l); err != nil {
			if errors.Is(err, raft.ErrLogNotFound) && i <= covered {
				continue
			}
			return storeInfo{}, fmt.Sprintf("log entry %d (of %d to %d): %v", i, span.first, span.last, err), nil
		}
		if l.Index != i {
			return storeInfo{}, fmt.Sprintf("log entry stored at %d says it is entry %d", i, l.Index), nil
		}
		if l.Type == raft.LogCommand && checkEntry != nil {
			if err := checkEntry(&l); err != nil {
				return storeInfo{}, fmt.Sprintf("log entry %d: %v", i, err), nil
			}
		}
	}
	return span, "", nil
}
