package retry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// t0 is a fixed, whole-second clock for HTTP-date tests.
var t0 = time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC)

func fixedNow() time.Time { return t0 }

func TestServerHints(t *testing.T) {
	half := func() float64 { return 0.5 }
	tests := []struct {
		name       string
		steps      []step
		opts       Options
		wantDelays []time.Duration
		wantStatus int
	}{
		{"Retry-After seconds", []step{reply429("Retry-After", "7"), ok200}, Options{},
			[]time.Duration{7 * time.Second}, 200},
		{"Retry-After IMF-fixdate", []step{reply429("Retry-After", t0.Add(12*time.Second).Format(http.TimeFormat)), ok200}, Options{},
			[]time.Duration{12 * time.Second}, 200},
		{"Retry-After RFC 850 date", []step{reply429("Retry-After", t0.Add(9*time.Second).Format(time.RFC850)), ok200}, Options{},
			[]time.Duration{9 * time.Second}, 200},
		{"Retry-After date in the past waits MinDelay", []step{reply429("Retry-After", t0.Add(-time.Hour).Format(http.TimeFormat)), ok200}, Options{},
			[]time.Duration{DefaultMinDelay}, 200},
		{"Retry-After 0 still waits MinDelay", []step{reply429("Retry-After", "0"), ok200}, Options{},
			[]time.Duration{DefaultMinDelay}, 200},
		{"MinDelay raises a shorter hint", []step{reply429("Retry-After", "0"), ok200}, Options{MinDelay: 250 * time.Millisecond},
			[]time.Duration{250 * time.Millisecond}, 200},
		{"RateLimit t when Retry-After is absent", []step{reply429("RateLimit", `"default";r=0;t=30`), ok200}, Options{},
			[]time.Duration{30 * time.Second}, 200},
		{"Retry-After wins over RateLimit", []step{reply429("Retry-After", "5", "RateLimit", `"default";r=0;t=30`), ok200}, Options{},
			[]time.Duration{5 * time.Second}, 200},
		{"malformed Retry-After falls back to RateLimit", []step{reply429("Retry-After", "soon", "RateLimit", `"default";r=0;t=3`), ok200}, Options{},
			[]time.Duration{3 * time.Second}, 200},
		{"longest t of the exhausted policies", []step{reply429("RateLimit", `"burst";r=0;t=2, "day";r=0;t=20, "hour";r=4;t=25`), ok200}, Options{},
			[]time.Duration{20 * time.Second}, 200},
		{"RateLimit with quota left means backoff", []step{reply429("RateLimit", `"default";r=3;t=30`), ok200}, Options{Rand: half},
			[]time.Duration{DefaultMinDelay + (DefaultBaseDelay-DefaultMinDelay)/2}, 200},
		{"RateLimit-Reset seconds", []step{reply429("RateLimit-Reset", "12"), ok200}, Options{},
			[]time.Duration{12 * time.Second}, 200},
		{"RateLimit wins over RateLimit-Reset", []step{reply429("RateLimit", `"default";r=0;t=4`, "RateLimit-Reset", "12"), ok200}, Options{},
			[]time.Duration{4 * time.Second}, 200},
		{"503 with Retry-After", []step{replyWith(503, "Retry-After", "2"), ok200}, Options{},
			[]time.Duration{2 * time.Second}, 200},
		{"no hint means backoff", []step{reply429(), reply429(), ok200}, Options{Rand: half, BaseDelay: time.Second, MinDelay: 200 * time.Millisecond},
			[]time.Duration{600 * time.Millisecond, 1100 * time.Millisecond}, 200},
		{"500 is not retried", []step{replyWith(500, "Retry-After", "1")}, Options{},
			nil, 500},
		{"404 is not retried", []step{replyWith(404)}, Options{},
			nil, 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, s := newScript(t, tt.steps...)
			var rec sleeps
			tt.opts.Now = fixedNow
			tr := newTransport(t, srv, &rec, tt.opts)
			status, _ := get(t, tr, srv.URL)
			if status != tt.wantStatus {
				t.Errorf("status %d, want %d", status, tt.wantStatus)
			}
			if got := rec.got(); !slices.Equal(got, tt.wantDelays) {
				t.Errorf("delays %v, want %v", got, tt.wantDelays)
			}
			if got, want := s.requests(), len(tt.wantDelays)+1; got != want {
				t.Errorf("server saw %d requests, want %d", got, want)
			}
		})
	}
}

func TestFullJitterBounds(t *testing.T) {
	const (
		base     = 100 * time.Millisecond
		minDelay = 20 * time.Millisecond
		maxDelay = 3 * time.Second
		retries  = 8
	)
	srv, _ := newScript(t, reply429())
	budget, err := NewBudget(maxBudgetTokens, 1)
	if err != nil {
		t.Fatal(err)
	}
	src := rand.New(rand.NewPCG(1, 2))
	var mu sync.Mutex
	byRetry := make(map[int][]time.Duration)
	var rec sleeps
	tr := newTransport(t, srv, &rec, Options{
		MaxRetries: retries, BaseDelay: base, MinDelay: minDelay, MaxDelay: maxDelay, Budget: budget,
		Rand: src.Float64, // requests are sequential, so an unsynchronised source is fine
		OnRetry: func(attempt int, delay time.Duration, _ *http.Response, _ error) {
			mu.Lock()
			byRetry[attempt] = append(byRetry[attempt], delay)
			mu.Unlock()
		},
	})
	for range 100 {
		if status, _ := get(t, tr, srv.URL); status != http.StatusTooManyRequests {
			t.Fatalf("status %d, want 429", status)
		}
	}
	for n := 1; n <= retries; n++ {
		ceiling := min(maxDelay, base<<(n-1))
		ds := byRetry[n]
		if len(ds) != 100 {
			t.Fatalf("retry %d: %d waits, want 100", n, len(ds))
		}
		for _, d := range ds {
			if d < minDelay || d > ceiling {
				t.Errorf("retry %d: wait %v outside [%v, %v]", n, d, minDelay, ceiling)
			}
		}
		// Jitter spreads the waits: they are not all equal, and both halves
		// of the range are used.
		lo, hi := slices.Min(ds), slices.Max(ds)
		mid := minDelay + (ceiling-minDelay)/2
		if !(lo < mid && hi > mid) {
			t.Errorf("retry %d: waits in [%v, %v], want both sides of %v", n, lo, hi, mid)
		}
	}
}

func TestGivesUpAfterMaxRetries(t *testing.T) {
	srv, s := newScript(t, reply429("Retry-After", "1"))
	var rec sleeps
	var reasons []error
	tr := newTransport(t, srv, &rec, Options{OnGiveUp: func(attempt int, reason error) {
		if attempt != DefaultMaxRetries+1 {
			t.Errorf("OnGiveUp attempt %d, want %d", attempt, DefaultMaxRetries+1)
		}
		reasons = append(reasons, reason)
	}})
	status, body := get(t, tr, srv.URL)
	if status != http.StatusTooManyRequests || body != "Too Many Requests" {
		t.Errorf("got %d %q, want the last 429 intact", status, body)
	}
	if got := s.requests(); got != DefaultMaxRetries+1 {
		t.Errorf("server saw %d requests, want %d", got, DefaultMaxRetries+1)
	}
	if len(reasons) != 1 || !errors.Is(reasons[0], ErrAttemptsExhausted) {
		t.Errorf("give-up reasons %v, want [ErrAttemptsExhausted]", reasons)
	}
}

func TestWaitLongerThanMaxDelayReturnsResponse(t *testing.T) {
	tests := []struct {
		name string
		st   step
	}{
		{"Retry-After seconds", reply429("Retry-After", "3600")},
		{"Retry-After date", reply429("Retry-After", t0.Add(time.Hour).Format(http.TimeFormat))},
		{"RateLimit t", reply429("RateLimit", `"default";r=0;t=31`)},
		{"huge Retry-After", reply429("Retry-After", "99999999999999999999999")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, s := newScript(t, tt.st, ok200)
			var rec sleeps
			var reason error
			tr := newTransport(t, srv, &rec, Options{Now: fixedNow, OnGiveUp: func(_ int, r error) { reason = r }})
			req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatalf("RoundTrip: %v", err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusTooManyRequests || string(body) != "Too Many Requests" {
				t.Errorf("got %d %q, want the 429 itself", resp.StatusCode, body)
			}
			for k, v := range tt.st.header {
				if got := resp.Header.Get(k); got != v {
					t.Errorf("header %s = %q, want %q", k, got, v)
				}
			}
			if s.requests() != 1 || len(rec.got()) != 0 {
				t.Errorf("%d requests, waits %v; want 1 request and no wait", s.requests(), rec.got())
			}
			if !errors.Is(reason, ErrWaitTooLong) {
				t.Errorf("give-up reason %v, want ErrWaitTooLong", reason)
			}
		})
	}
}

func TestBudgetStopsRetriesAgainstFailingServer(t *testing.T) {
	srv, s := newScript(t, reply429("Retry-After", "0"))
	budget, err := NewBudget(10, 0.1)
	if err != nil {
		t.Fatal(err)
	}
	var rec sleeps
	exhausted := 0
	tr := newTransport(t, srv, &rec, Options{Budget: budget, MaxRetries: 100, OnGiveUp: func(_ int, r error) {
		if errors.Is(r, ErrBudgetExhausted) {
			exhausted++
		}
	}})
	const n = 1000
	for range n {
		if status, _ := get(t, tr, srv.URL); status != http.StatusTooManyRequests {
			t.Fatalf("status %d, want 429", status)
		}
	}
	// The budget starts at 10 tokens and allows a retry while more than 5
	// remain after a failure: the failures leaving 9, 8, 7 and 6 are
	// retried, and nothing after.
	retries := s.requests() - n
	if retries != 4 {
		t.Errorf("%d retries over %d requests, want 4", retries, n)
	}
	if exhausted != n {
		t.Errorf("%d give-ups for the budget, want %d", exhausted, n)
	}
	if len(rec.got()) != retries {
		t.Errorf("%d waits for %d retries", len(rec.got()), retries)
	}
}

func TestSuccessesRefillSharedBudget(t *testing.T) {
	failing, fs := newScript(t, reply429("Retry-After", "0"))
	healthy, _ := newScript(t, ok200)
	budget, err := NewBudget(10, 0.1)
	if err != nil {
		t.Fatal(err)
	}
	var rec sleeps
	// Two Transports, one budget.
	tf := newTransport(t, failing, &rec, Options{Budget: budget, MaxRetries: 100})
	th := newTransport(t, healthy, &rec, Options{Budget: budget})

	// retriesOf sends one request to the failing server and returns how
	// many retries it made.
	retriesOf := func() int {
		before := fs.requests()
		get(t, tf, failing.URL)
		return fs.requests() - before - 1
	}
	if got := retriesOf(); got == 0 {
		t.Fatal("a full budget allowed no retry")
	}
	if got := retriesOf(); got != 0 {
		t.Fatalf("%d retries with an exhausted budget, want 0", got)
	}
	// The two requests left 10 - 6 = 4 tokens. 30 successes add 3, so the
	// next failure leaves 6, more than maxTokens/2, and may be retried.
	if got := budget.Tokens(); got != 4 {
		t.Fatalf("%v tokens left, want 4", got)
	}
	for range 30 {
		if status, _ := get(t, th, healthy.URL); status != 200 {
			t.Fatalf("healthy server answered %d", status)
		}
	}
	if !budget.MayRetry() {
		t.Fatalf("budget at %v tokens after 30 successes, want retries allowed", budget.Tokens())
	}
	if got := retriesOf(); got != 1 {
		t.Errorf("%d retries after the refill, want 1", got)
	}
}

func TestBudgetBoundsRetryFraction(t *testing.T) {
	for _, failRate := range []float64{0.05, 0.3, 0.7, 1} {
		t.Run(fmt.Sprintf("fail rate %v", failRate), func(t *testing.T) {
			src := rand.New(rand.NewPCG(7, uint64(failRate*100)))
			var mu sync.Mutex
			var attempts, successes int
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				mu.Lock()
				defer mu.Unlock()
				attempts++
				if src.Float64() < failRate {
					w.Header().Set("Retry-After", "0")
					w.WriteHeader(http.StatusTooManyRequests)
					return
				}
				successes++
			}))
			defer srv.Close()
			budget, err := NewBudget(10, 0.1)
			if err != nil {
				t.Fatal(err)
			}
			var rec sleeps
			tr := newTransport(t, srv, &rec, Options{Budget: budget, MaxRetries: 10})
			const n = 1000
			for range n {
				get(t, tr, srv.URL)
			}
			mu.Lock()
			defer mu.Unlock()
			retries := attempts - n
			// Each retry spends a token above maxTokens/2, and only
			// successes add tokens back.
			if bound := 5 + 0.1*float64(successes); float64(retries) > bound {
				t.Errorf("fail rate %v: %d retries, %d successes; want at most %v retries", failRate, retries, successes, bound)
			}
			t.Logf("fail rate %v: %d requests, %d retries, %d successes", failRate, n, retries, successes)
		})
	}
}

func TestSharedBudgetUnderConcurrency(t *testing.T) {
	srv, s := newScript(t, reply429("Retry-After", "0"))
	budget, err := NewBudget(10, 0.1)
	if err != nil {
		t.Fatal(err)
	}
	var rec sleeps
	trs := []*Transport{
		newTransport(t, srv, &rec, Options{Budget: budget, MaxRetries: 50}),
		newTransport(t, srv, &rec, Options{Budget: budget, MaxRetries: 50}),
	}
	const workers, each = 16, 25
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range each {
				get(t, trs[w%2], srv.URL)
			}
		})
	}
	wg.Wait()
	// Tokens only go down, and a retry needs more than 5 left after its
	// failure: at most 4 retries in all, however the requests interleave.
	if retries := s.requests() - workers*each; retries > 4 {
		t.Errorf("%d retries in all, want at most 4", retries)
	}
}

func TestContextDoneDuringWait(t *testing.T) {
	tests := []struct {
		name    string
		ctx     func() (context.Context, context.CancelFunc)
		cancel  bool // cancel once the Transport is waiting
		wantErr error
	}{
		{"canceled", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }, true, context.Canceled},
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), time.Second)
		}, false, context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, s := newScript(t, reply429("Retry-After", "3600"))
			base := &tracking{base: srv.Client().Transport}
			waiting := make(chan struct{})
			// The real Sleep: the wait is an hour unless the context ends.
			tr, err := New(base, Options{MaxDelay: 2 * time.Hour, OnRetry: func(int, time.Duration, *http.Response, error) { close(waiting) }})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := tt.ctx()
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
			type result struct {
				resp *http.Response
				err  error
			}
			done := make(chan result, 1)
			go func() {
				resp, err := tr.RoundTrip(req)
				done <- result{resp, err}
			}()
			deadline := time.After(30 * time.Second) // a hang, not a timing check
			select {
			case <-waiting:
			case r := <-done:
				// Only the deadline case can end this way, on a machine so
				// slow that the first attempt outlived the deadline.
				if r.resp != nil {
					r.resp.Body.Close()
				}
				t.Skipf("the context ended before the first response: %v", r.err)
			case <-deadline:
				t.Fatal("the Transport never started waiting")
			}
			if tt.cancel {
				cancel()
			}
			var r result
			select {
			case r = <-done:
			case <-deadline:
				t.Fatal("RoundTrip kept waiting after the context ended")
			}
			if r.resp != nil || !errors.Is(r.err, tt.wantErr) {
				t.Fatalf("got %v, %v; want nil, %v", r.resp, r.err, tt.wantErr)
			}
			if !strings.HasPrefix(r.err.Error(), "retry: ") {
				t.Errorf("error %q lacks the package prefix", r.err)
			}
			if s.requests() != 1 {
				t.Errorf("server saw %d requests, want 1", s.requests())
			}
			for i, b := range base.all() {
				if _, closed := b.state(); !closed {
					t.Errorf("response %d left open", i)
				}
			}
		})
	}
}

func TestReplayRules(t *testing.T) {
	const payload = "payload"
	opaque := func() io.Reader { return io.MultiReader(strings.NewReader(payload)) } // no GetBody
	tests := []struct {
		name       string
		method     string
		body       func() io.Reader // nil for no body
		header     string           // Idempotency-Key, if set
		replayable func(*http.Request) bool
		wantTries  int
	}{
		{"GET without body", http.MethodGet, nil, "", nil, 3},
		{"POST with GetBody", http.MethodPost, func() io.Reader { return strings.NewReader(payload) }, "", nil, 3},
		{"POST with opaque body", http.MethodPost, opaque, "", nil, 1},
		{"PUT with opaque body", http.MethodPut, opaque, "", Idempotent, 1},
		{"POST without body", http.MethodPost, nil, "", nil, 3},
		{"POST refused by Idempotent", http.MethodPost, func() io.Reader { return strings.NewReader(payload) }, "", Idempotent, 1},
		{"POST with Idempotency-Key", http.MethodPost, func() io.Reader { return strings.NewReader(payload) }, "k1", Idempotent, 3},
		{"PUT with GetBody and Idempotent", http.MethodPut, func() io.Reader { return strings.NewReader(payload) }, "", Idempotent, 3},
		{"DELETE with Idempotent", http.MethodDelete, nil, "", Idempotent, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, s := newScript(t, reply429("Retry-After", "0"), reply429("Retry-After", "0"), ok200)
			var rec sleeps
			var reason error
			tr := newTransport(t, srv, &rec, Options{Replayable: tt.replayable, OnGiveUp: func(_ int, r error) { reason = r }})
			var body io.Reader
			if tt.body != nil {
				body = tt.body()
			}
			req, err := http.NewRequest(tt.method, srv.URL, body)
			if err != nil {
				t.Fatal(err)
			}
			if tt.header != "" {
				req.Header.Set("Idempotency-Key", tt.header)
			}
			origBody, origHeader := req.Body, req.Header.Clone()
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatalf("RoundTrip: %v", err)
			}
			resp.Body.Close()
			if got := s.requests(); got != tt.wantTries {
				t.Errorf("server saw %d requests, want %d", got, tt.wantTries)
			}
			if tt.wantTries == 1 && !errors.Is(reason, ErrNotReplayable) {
				t.Errorf("give-up reason %v, want ErrNotReplayable", reason)
			}
			if tt.wantTries > 1 && resp.StatusCode != 200 {
				t.Errorf("status %d, want 200 after retries", resp.StatusCode)
			}
			want := ""
			if tt.body != nil {
				want = payload
			}
			for i, got := range s.received() {
				if got != want {
					t.Errorf("attempt %d sent body %q, want %q", i+1, got, want)
				}
			}
			if req.Body != origBody || !equalHeader(req.Header, origHeader) {
				t.Error("RoundTrip modified the caller's request")
			}
		})
	}
}

func equalHeader(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

func TestGetBodyError(t *testing.T) {
	srv, s := newScript(t, reply429("Retry-After", "0"), ok200)
	base := &tracking{base: srv.Client().Transport}
	errGone := errors.New("body gone")
	tr, err := New(base, Options{Sleep: (&sleeps{}).sleep})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("x"))
	req.GetBody = func() (io.ReadCloser, error) { return nil, errGone }
	resp, err := tr.RoundTrip(req)
	if resp != nil || !errors.Is(err, errGone) || !strings.HasPrefix(err.Error(), "retry: ") {
		t.Fatalf("got %v, %v; want nil and a retry: error wrapping %v", resp, err, errGone)
	}
	if s.requests() != 1 {
		t.Errorf("server saw %d requests, want 1", s.requests())
	}
	for i, b := range base.all() {
		if _, closed := b.state(); !closed {
			t.Errorf("response %d left open", i)
		}
	}
}

func TestDiscardedBodiesDrainedAndConnectionReused(t *testing.T) {
	s := &script{steps: []step{reply429("Retry-After", "0"), replyWith(503), ok200}}
	srv := httptest.NewUnstartedServer(s)
	var conns atomic.Int32
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	base := &tracking{base: srv.Client().Transport}
	tr, err := New(base, Options{Sleep: (&sleeps{}).sleep, Rand: func() float64 { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	if status, body := get(t, tr, srv.URL); status != 200 || body != "OK" {
		t.Fatalf("got %d %q, want 200 OK", status, body)
	}
	bodies := base.all()
	if len(bodies) != 3 {
		t.Fatalf("%d responses, want 3", len(bodies))
	}
	for i, b := range bodies[:2] {
		if eof, closed := b.state(); !eof || !closed {
			t.Errorf("discarded response %d: read to end %v, closed %v; want both", i, eof, closed)
		}
	}
	if got := conns.Load(); got != 1 {
		t.Errorf("%d connections for 3 sequential attempts, want 1", got)
	}
}

func TestRetryingErrors(t *testing.T) {
	errBoom := errors.New("connection reset")
	tests := []struct {
		name        string
		failures    int // errors before a 200
		shouldRetry func(*http.Response, error) bool
		wantTries   int
		wantErr     bool
		wantPrefix  bool
	}{
		{"errors not retried by default", 5, nil, 1, true, false},
		{"retried errors then success", 2, func(_ *http.Response, err error) bool { return err != nil }, 3, false, false},
		{"retried errors to the end", 10, func(_ *http.Response, err error) bool { return err != nil }, 4, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tries := 0
			base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				tries++
				if tries <= tt.failures {
					return nil, errBoom
				}
				return &http.Response{StatusCode: 200, Body: http.NoBody, Header: http.Header{}, Request: r}, nil
			})
			var rec sleeps
			tr, err := New(base, Options{ShouldRetry: tt.shouldRetry, Sleep: rec.sleep})
			if err != nil {
				t.Fatal(err)
			}
			req, _ := http.NewRequest(http.MethodGet, "http://example.invalid/", nil)
			resp, err := tr.RoundTrip(req)
			if tries != tt.wantTries {
				t.Errorf("%d attempts, want %d", tries, tt.wantTries)
			}
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want error: %v", err, tt.wantErr)
			}
			if err != nil {
				if resp != nil {
					t.Error("response and error both set")
				}
				if !errors.Is(err, errBoom) {
					t.Errorf("error %v does not wrap %v", err, errBoom)
				}
				if got := strings.HasPrefix(err.Error(), "retry: after "); got != tt.wantPrefix {
					t.Errorf("error %q: wrapped %v, want %v", err, got, tt.wantPrefix)
				}
				return
			}
			resp.Body.Close()
			for _, d := range rec.got() {
				if d < DefaultMinDelay {
					t.Errorf("wait %v below MinDelay", d)
				}
			}
		})
	}
}

func TestOnRetryReportsEachRetry(t *testing.T) {
	srv, _ := newScript(t, reply429("Retry-After", "1"), replyWith(503, "Retry-After", "2"), ok200)
	type call struct {
		attempt int
		delay   time.Duration
		status  int
	}
	var calls []call
	var rec sleeps
	tr := newTransport(t, srv, &rec, Options{OnRetry: func(attempt int, delay time.Duration, resp *http.Response, err error) {
		if err != nil {
			t.Errorf("OnRetry error %v", err)
		}
		calls = append(calls, call{attempt, delay, resp.StatusCode})
	}})
	get(t, tr, srv.URL)
	want := []call{{1, time.Second, 429}, {2, 2 * time.Second, 503}}
	if !slices.Equal(calls, want) {
		t.Errorf("OnRetry calls %v, want %v", calls, want)
	}
}

func TestConcurrentRequests(t *testing.T) {
	// The server rejects the first attempt of every request, by its ID.
	var seen sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, again := seen.LoadOrStore(r.Header.Get("X-Id"), true); !again {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	var rec sleeps
	budget, _ := NewBudget(1000, 1)
	tr := newTransport(t, srv, &rec, Options{Budget: budget, MaxRetries: 10})
	client := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	var ids atomic.Int64
	for range 32 {
		wg.Go(func() {
			for range 20 {
				req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
				req.Header.Set("X-Id", fmt.Sprint(ids.Add(1)))
				resp, err := client.Do(req)
				if err != nil {
					t.Errorf("Get: %v", err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Errorf("status %d, want 200", resp.StatusCode)
				}
			}
		})
	}
	wg.Wait()
	client.CloseIdleConnections()
	if got := len(rec.got()); got != 32*20 {
		t.Errorf("%d waits, want one per request: %d", got, 32*20)
	}
}

func TestCloseIdleConnectionsReachesBase(t *testing.T) {
	base := &closer{}
	tr, err := New(base, Options{})
	if err != nil {
		t.Fatal(err)
	}
	(&http.Client{Transport: tr}).CloseIdleConnections()
	if base.closed != 1 {
		t.Errorf("base CloseIdleConnections called %d times, want 1", base.closed)
	}
}

type closer struct{ closed int }

func (c *closer) RoundTrip(*http.Request) (*http.Response, error) { return nil, errors.New("unused") }
func (c *closer) CloseIdleConnections()                           { c.closed++ }
