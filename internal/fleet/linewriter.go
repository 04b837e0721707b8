package fleet

import (
	"strings"
	"sync"
)

// LineWriter hands what is written to it to Line, whole lines at a time
// (without the last newline): a harness's output into a test's log.
type LineWriter struct {
	Line func(string)
	mu   sync.Mutex
	buf  strings.Builder
}

func (w *LineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	s := w.buf.String()
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		w.Line(s[:i])
		w.buf.Reset()
		w.buf.WriteString(s[i+1:])
	}
	return len(p), nil
}
