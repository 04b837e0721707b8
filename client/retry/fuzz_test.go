package retry

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// FuzzParseRetryAfter feeds arbitrary values to the header parsers. None may
// panic or return a negative wait; ParseRetryAfter must accept exactly
// delay-seconds and HTTP-dates; and HeaderWait must prefer a valid
// Retry-After over the other fields.
func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{
		"0", "120", " 7 ", "-1", "1.5", "99999999999999999999",
		"Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994",
		`"default";r=0;t=30`, `"a";r=0;t=2, "b";r=0;t=9`, `(a b);r=0;t=1`, `%"caf%c3%a9";r=0;t=1`, `x;r=0;t=1,`,
	} {
		f.Add(s, int64(784111777))
	}
	f.Fuzz(func(t *testing.T, s string, unix int64) {
		now := time.Unix(unix, 0)
		d, ok := ParseRetryAfter(s, now)
		v := strings.Trim(s, " \t")
		_, dateErr := http.ParseTime(v)
		if want := isDelaySeconds(v) || dateErr == nil; ok != want {
			t.Fatalf("ParseRetryAfter(%q) ok = %v, want %v", s, ok, want)
		}
		if d < 0 {
			t.Fatalf("ParseRetryAfter(%q) = %v", s, d)
		}
		if rl, _ := ParseRateLimit(s); rl < 0 {
			t.Fatalf("ParseRateLimit(%q) = %v", s, rl)
		}
		h := http.Header{"Retry-After": {s}, "Ratelimit": {s}, "Ratelimit-Reset": {s}}
		hw, hok := HeaderWait(h, now)
		if hw < 0 || (ok && (!hok || hw != d)) {
			t.Fatalf("HeaderWait(%q) = %v, %v; Retry-After alone gives %v, %v", s, hw, hok, d, ok)
		}
	})
}
