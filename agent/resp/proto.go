package resp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
)

// The limits a client cannot pass (docs/api.md#the-redis-protocol): a
// command of more than maxArgs arguments, an argument over maxArgLen
// bytes or an inline command over maxInline is a protocol error, answered
// and followed by closing the connection, as Redis does: after it the
// stream cannot be resynchronised.
const (
	maxArgs   = 64
	maxArgLen = 4096
	maxInline = 16 << 10
)

// errProtocol is wrapped by every malformed-input error of the reader.
var errProtocol = errors.New("protocol error")

// reader reads commands: RESP arrays of bulk strings, as every client
// sends them, or inline commands (words on a line), as telnet and
// redis-cli's inline mode do. The arguments it returns alias its buffers
// and stay valid until the next call.
type reader struct {
	r    *bufio.Reader
	args [][]byte
	buf  []byte // the arguments' bytes, reused
}

func newReader(r io.Reader, size int) *reader {
	return &reader{r: bufio.NewReaderSize(r, size), args: make([][]byte, 0, maxArgs), buf: make([]byte, 0, 512)}
}

// buffered reports whether a whole or partial command is already read
// ahead: a pipelined batch, whose replies wait to be written together.
func (rd *reader) buffered() bool { return rd.r.Buffered() > 0 }

// next reads one command. io.EOF at a command's boundary is a clean end;
// an error wrapping errProtocol is malformed input.
func (rd *reader) next() ([][]byte, error) {
	rd.args, rd.buf = rd.args[:0], rd.buf[:0]
	line, err := rd.line(maxInline)
	if err != nil {
		return nil, err
	}
	if len(line) == 0 {
		return rd.args, nil // an empty inline command: ignored
	}
	if line[0] != '*' {
		return rd.inline(line)
	}
	n, ok := parseInt(line[1:])
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: invalid multibulk length", errProtocol)
	case n <= 0:
		return rd.args, nil
	case n > maxArgs:
		return nil, fmt.Errorf("%w: %d arguments, at most %d", errProtocol, n, maxArgs)
	}
	// Offsets first, slices after: buf may move while it grows.
	var ends [maxArgs]int
	for i := 0; i < int(n); i++ {
		head, err := rd.line(32)
		if err != nil {
			return nil, noEOF(err)
		}
		if len(head) == 0 || head[0] != '$' {
			return nil, fmt.Errorf("%w: expected '$', got '%s'", errProtocol, printable(head))
		}
		size, ok := parseInt(head[1:])
		if !ok || size < 0 {
			return nil, fmt.Errorf("%w: invalid bulk length", errProtocol)
		}
		if size > maxArgLen {
			return nil, fmt.Errorf("%w: an argument of %d bytes, at most %d", errProtocol, size, maxArgLen)
		}
		start := len(rd.buf)
		rd.buf = slices.Grow(rd.buf, int(size)+2)[:start+int(size)+2]
		if _, err := io.ReadFull(rd.r, rd.buf[start:]); err != nil {
			return nil, noEOF(err)
		}
		if rd.buf[len(rd.buf)-2] != '\r' || rd.buf[len(rd.buf)-1] != '\n' {
			return nil, fmt.Errorf("%w: a bulk string not ended by CRLF", errProtocol)
		}
		rd.buf = rd.buf[:len(rd.buf)-2]
		ends[i] = len(rd.buf)
	}
	start := 0
	for i := 0; i < int(n); i++ {
		rd.args = append(rd.args, rd.buf[start:ends[i]:ends[i]])
		start = ends[i]
	}
	return rd.args, nil
}

// inline splits an inline command on spaces (no quoting: the commands
// here take names and numbers).
func (rd *reader) inline(line []byte) ([][]byte, error) {
	rd.buf = append(rd.buf, line...)
	b := rd.buf
	for i := 0; i < len(b); {
		for i < len(b) && (b[i] == ' ' || b[i] == '\t') {
			i++
		}
		j := i
		for j < len(b) && b[j] != ' ' && b[j] != '\t' {
			j++
		}
		if j > i {
			if len(rd.args) == maxArgs {
				return nil, fmt.Errorf("%w: more than %d arguments", errProtocol, maxArgs)
			}
			rd.args = append(rd.args, b[i:j:j])
		}
		i = j
	}
	return rd.args, nil
}

// line reads a line without its CRLF (or LF), of at most max bytes. The
// slice aliases the bufio buffer.
func (rd *reader) line(max int) ([]byte, error) {
	l, err := rd.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) || len(l) > max+2 {
		return nil, fmt.Errorf("%w: a line over %d bytes", errProtocol, max)
	}
	if err != nil {
		if len(l) > 0 {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
	l = l[:len(l)-1]
	if n := len(l); n > 0 && l[n-1] == '\r' {
		l = l[:n-1]
	}
	return l, nil
}

func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// parseInt parses a decimal integer without allocating.
func parseInt(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	neg := b[0] == '-'
	if neg {
		b = b[1:]
		if len(b) == 0 {
			return 0, false
		}
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// printable is b for an error message: at most 32 bytes, control bytes
// escaped.
func printable(b []byte) string {
	if len(b) > 32 {
		b = b[:32]
	}
	q := strconv.QuoteToASCII(string(b))
	return q[1 : len(q)-1]
}

// writer writes replies in RESP2 or, after HELLO 3, RESP3.
type writer struct {
	w     *bufio.Writer
	resp3 bool
	num   [24]byte
}

func (w *writer) simple(s string) {
	w.w.WriteByte('+')
	w.w.WriteString(s)
	w.w.WriteString("\r\n")
}

func (w *writer) err(s string) {
	w.w.WriteByte('-')
	w.w.WriteString(s)
	w.w.WriteString("\r\n")
}

func (w *writer) int(n int64) {
	w.w.WriteByte(':')
	w.w.Write(strconv.AppendInt(w.num[:0], n, 10))
	w.w.WriteString("\r\n")
}

func (w *writer) bulk(s string) {
	w.w.WriteByte('$')
	w.w.Write(strconv.AppendInt(w.num[:0], int64(len(s)), 10))
	w.w.WriteString("\r\n")
	w.w.WriteString(s)
	w.w.WriteString("\r\n")
}

func (w *writer) bulkBytes(b []byte) {
	w.w.WriteByte('$')
	w.w.Write(strconv.AppendInt(w.num[:0], int64(len(b)), 10))
	w.w.WriteString("\r\n")
	w.w.Write(b)
	w.w.WriteString("\r\n")
}

// null is RESP2's null bulk string, RESP3's null.
func (w *writer) null() {
	if w.resp3 {
		w.w.WriteString("_\r\n")
		return
	}
	w.w.WriteString("$-1\r\n")
}

func (w *writer) array(n int) {
	w.w.WriteByte('*')
	w.w.Write(strconv.AppendInt(w.num[:0], int64(n), 10))
	w.w.WriteString("\r\n")
}

// mapHead starts a map of n pairs: RESP3's map, RESP2's flat array.
func (w *writer) mapHead(n int) {
	if w.resp3 {
		w.w.WriteByte('%')
		w.w.Write(strconv.AppendInt(w.num[:0], int64(n), 10))
		w.w.WriteString("\r\n")
		return
	}
	w.array(2 * n)
}

func (w *writer) boolean(b bool) {
	if w.resp3 {
		if b {
			w.w.WriteString("#t\r\n")
		} else {
			w.w.WriteString("#f\r\n")
		}
		return
	}
	if b {
		w.int(1)
	} else {
		w.int(0)
	}
}
