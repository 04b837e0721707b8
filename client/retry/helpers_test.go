package retry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// step is one scripted server reply.
type step struct {
	status int
	header map[string]string
}

// reply429 is a 429 with the given headers, as name, value pairs.
func reply429(kv ...string) step { return replyWith(http.StatusTooManyRequests, kv...) }

func replyWith(status int, kv ...string) step {
	h := make(map[string]string)
	for i := 0; i+1 < len(kv); i += 2 {
		h[kv[i]] = kv[i+1]
	}
	return step{status: status, header: h}
}

var ok200 = step{status: http.StatusOK}

// script is a test server that answers the nth request with steps[n], the
// last step repeating, and records what it received.
type script struct {
	mu     sync.Mutex
	steps  []step
	n      int
	bodies []string
}

// newScript starts an httptest.Server playing steps, closed at the end of
// the test.
func newScript(t testing.TB, steps ...step) (*httptest.Server, *script) {
	t.Helper()
	s := &script{steps: steps}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return srv, s
}

func (s *script) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	st := s.steps[min(s.n, len(s.steps)-1)]
	s.n++
	s.bodies = append(s.bodies, string(body))
	s.mu.Unlock()
	for k, v := range st.header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(st.status)
	_, _ = io.WriteString(w, http.StatusText(st.status))
}

// requests returns how many requests the server has received.
func (s *script) requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

func (s *script) received() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.bodies...)
}

// sleeps records the waits asked of an injected Sleep and returns at once.
type sleeps struct {
	mu     sync.Mutex
	delays []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.delays = append(s.delays, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *sleeps) got() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.delays...)
}

// newTransport returns a Transport over srv's client with the recorder as
// its Sleep, failing the test on a configuration error.
func newTransport(t testing.TB, srv *httptest.Server, rec *sleeps, opts Options) *Transport {
	t.Helper()
	if opts.Sleep == nil {
		opts.Sleep = rec.sleep
	}
	tr, err := New(srv.Client().Transport, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return tr
}

// get sends a GET through tr and returns the status and body.
func get(t testing.TB, tr http.RoundTripper, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("RoundTrip: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return resp.StatusCode, string(body)
}

// roundTripFunc adapts a function to http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// trackedBody records whether a response body was read to the end and
// closed.
type trackedBody struct {
	io.ReadCloser
	mu          sync.Mutex
	eof, closed bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.mu.Lock()
		b.eof = true
		b.mu.Unlock()
	}
	return n, err
}

func (b *trackedBody) Close() error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	return b.ReadCloser.Close()
}

func (b *trackedBody) state() (eof, closed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.eof, b.closed
}

// tracking wraps base so that every response body is a trackedBody, kept
// in order.
type tracking struct {
	base   http.RoundTripper
	mu     sync.Mutex
	bodies []*trackedBody
}

func (tr *tracking) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := tr.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	b := &trackedBody{ReadCloser: resp.Body}
	resp.Body = b
	tr.mu.Lock()
	tr.bodies = append(tr.bodies, b)
	tr.mu.Unlock()
	return resp, nil
}

func (tr *tracking) all() []*trackedBody {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]*trackedBody(nil), tr.bodies...)
}
