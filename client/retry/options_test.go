package retry

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestNewRejectsInvalidOptions(t *testing.T) {
	tests := []struct {
		name  string
		opts  Options
		field string
	}{
		{"negative MaxRetries", Options{MaxRetries: -1}, "MaxRetries"},
		{"negative BaseDelay", Options{BaseDelay: -time.Second}, "BaseDelay"},
		{"negative MinDelay", Options{MinDelay: -1}, "MinDelay"},
		{"negative MaxDelay", Options{MaxDelay: -1}, "MaxDelay"},
		{"MinDelay above default MaxDelay", Options{MinDelay: time.Minute}, "MinDelay"},
		{"MinDelay above MaxDelay", Options{MinDelay: 10 * time.Second, MaxDelay: 5 * time.Second}, "MinDelay"},
		{"MaxDelay below default MinDelay", Options{MaxDelay: time.Millisecond}, "MinDelay"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := New(nil, tt.opts)
			if tr != nil || err == nil {
				t.Fatalf("New(%+v) = %v, %v; want an error", tt.opts, tr, err)
			}
			var ce *ConfigError
			if !errors.Is(err, ErrInvalidConfig) || !errors.As(err, &ce) || ce.Field != tt.field {
				t.Errorf("error %v: want a *ConfigError for %s wrapping ErrInvalidConfig", err, tt.field)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "retry: invalid "+tt.field+": ") {
				t.Errorf("error %q should start with %q", msg, "retry: invalid "+tt.field+": ")
			}
		})
	}
}

func TestNewDefaults(t *testing.T) {
	tr, err := New(nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := tr.cfg
	if tr.base != http.DefaultTransport {
		t.Error("a nil base should mean http.DefaultTransport")
	}
	if c.maxRetries != DefaultMaxRetries || c.baseDelay != DefaultBaseDelay || c.minDelay != DefaultMinDelay || c.maxDelay != DefaultMaxDelay {
		t.Errorf("defaults %d %v %v %v", c.maxRetries, c.baseDelay, c.minDelay, c.maxDelay)
	}
	if c.budget == nil || c.budget.Tokens() != DefaultBudgetTokens {
		t.Error("a nil Budget should mean a full default budget")
	}
	other, _ := New(nil, Options{})
	if other.cfg.budget == c.budget {
		t.Error("Transports without a Budget should not share one")
	}
	if c.now == nil || c.sleep == nil || c.rand == nil || c.replayable == nil || c.shouldRetry == nil {
		t.Error("a default is missing")
	}
	if r := c.rand(); r < 0 || r >= 1 {
		t.Errorf("default Rand returned %v", r)
	}
}

func TestDefaultShouldRetry(t *testing.T) {
	for status, want := range map[int]bool{200: false, 204: false, 400: false, 404: false, 429: true, 500: false, 502: false, 503: true, 504: false} {
		if got := DefaultShouldRetry(&http.Response{StatusCode: status}, nil); got != want {
			t.Errorf("status %d: %v, want %v", status, got, want)
		}
	}
	if DefaultShouldRetry(nil, errors.New("reset")) {
		t.Error("errors should not be retried by default")
	}
}

func TestIdempotent(t *testing.T) {
	tests := []struct {
		method, header string
		want           bool
	}{
		{"", "", true}, {"GET", "", true}, {"HEAD", "", true}, {"OPTIONS", "", true}, {"TRACE", "", true},
		{"PUT", "", true}, {"DELETE", "", true}, {"POST", "", false}, {"PATCH", "", false}, {"CONNECT", "", false},
		{"POST", "Idempotency-Key", true}, {"PATCH", "X-Idempotency-Key", true},
	}
	for _, tt := range tests {
		req := &http.Request{Method: tt.method, Header: http.Header{}}
		if tt.header != "" {
			req.Header[tt.header] = []string{"k"}
		}
		if got := Idempotent(req); got != tt.want {
			t.Errorf("Idempotent(%q, %q) = %v, want %v", tt.method, tt.header, got, tt.want)
		}
	}
}
