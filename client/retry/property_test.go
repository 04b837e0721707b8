package retry

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// isDelaySeconds reports whether s is 1*DIGIT.
func isDelaySeconds(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// genRetryAfterish draws strings near the valid forms, so that both
// accepted and rejected values are common: digits with stray characters,
// dates with edits, and arbitrary strings.
func genRetryAfterish() *rapid.Generator[string] {
	return rapid.OneOf(
		rapid.StringMatching(`[ \t]?[-+]?[0-9]{0,25}[.s ]?[0-9]{0,2}[ \t]?`),
		rapid.Custom(func(t *rapid.T) string {
			d := time.Unix(rapid.Int64Range(0, 4e9).Draw(t, "unix"), 0).UTC()
			layout := rapid.SampledFrom([]string{http.TimeFormat, time.RFC850, time.ANSIC, time.RFC3339, time.RFC1123Z}).Draw(t, "layout")
			s := d.Format(layout)
			if cut := rapid.IntRange(0, len(s)).Draw(t, "cut"); rapid.Bool().Draw(t, "mangle") {
				s = s[:cut] + rapid.StringN(0, 2, 2).Draw(t, "junk") + s[cut:]
			}
			return s
		}),
		rapid.String(),
	)
}

// The parser accepts exactly delay-seconds and HTTP-dates, never panics,
// and never returns a negative wait.
func TestPropParseRetryAfterAcceptsExactly(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := genRetryAfterish().Draw(t, "value")
		now := time.Unix(rapid.Int64Range(0, 4e9).Draw(t, "now"), 0)
		d, ok := ParseRetryAfter(s, now)
		v := strings.Trim(s, " \t")
		_, dateErr := http.ParseTime(v)
		if want := isDelaySeconds(v) || dateErr == nil; ok != want {
			t.Fatalf("ParseRetryAfter(%q) ok = %v, want %v", s, ok, want)
		}
		if d < 0 || (!ok && d != 0) {
			t.Fatalf("ParseRetryAfter(%q) = %v, %v", s, d, ok)
		}
	})
}

// Every non-negative integer is a wait of that many seconds, saturating at
// the largest Duration; a sign, a fraction or a unit makes it invalid.
func TestPropParseRetryAfterSeconds(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.Uint64().Draw(t, "n")
		s := strconv.FormatUint(n, 10)
		want := time.Duration(math.MaxInt64)
		if n <= uint64(maxSeconds) {
			want = time.Duration(n) * time.Second
		}
		if d, ok := ParseRetryAfter(s, t0); !ok || d != want {
			t.Fatalf("ParseRetryAfter(%q) = %v, %v; want %v", s, d, ok, want)
		}
		for _, bad := range []string{"-" + s, "+" + s, s + ".0", s + "s", s + " 1"} {
			if d, ok := ParseRetryAfter(bad, t0); ok {
				t.Fatalf("ParseRetryAfter(%q) = %v, true; want rejected", bad, d)
			}
		}
	})
}

// An HTTP-date in any of the three formats is the wait from now until then,
// or none if it has passed.
func TestPropParseRetryAfterDates(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		layout := rapid.SampledFrom([]string{http.TimeFormat, time.RFC850, time.ANSIC}).Draw(t, "layout")
		lo, hi := int64(-2e9), int64(253402300799) // years 1906 to 9999
		if layout == time.RFC850 {
			lo, hi = 0, 3e9 // two-digit years read as 1969 to 2068
		}
		date := time.Unix(rapid.Int64Range(lo, hi).Draw(t, "date"), 0).UTC()
		now := time.Unix(rapid.Int64Range(lo, hi).Draw(t, "now"), rapid.Int64Range(0, 999999999).Draw(t, "ns"))
		s := date.Format(layout)
		d, ok := ParseRetryAfter(s, now)
		if want := max(date.Sub(now), 0); !ok || d != want {
			t.Fatalf("ParseRetryAfter(%q, %v) = %v, %v; want %v", s, now, d, ok, want)
		}
	})
}

// A RateLimit List built from random policies waits for the longest t of
// the exhausted ones.
func TestPropParseRateLimit(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 5).Draw(t, "policies")
		var parts []string
		var want time.Duration
		exhausted := false
		for range n {
			r := rapid.IntRange(0, 3).Draw(t, "r")
			tt := rapid.Int64Range(0, 1e6).Draw(t, "t")
			name := rapid.SampledFrom([]string{`"default"`, `day`, `"per-key"`, `(a "b")`}).Draw(t, "name")
			extra := rapid.SampledFrom([]string{"", ";pk=:AQID:", ";q=100", ";w=?1", ";x=1.5"}).Draw(t, "extra")
			parts = append(parts, fmt.Sprintf("%s;r=%d%s;t=%d", name, r, extra, tt))
			if r == 0 {
				exhausted = true
				want = max(want, time.Duration(tt)*time.Second)
			}
		}
		v := strings.Join(parts, rapid.SampledFrom([]string{",", ", ", " ,\t"}).Draw(t, "sep"))
		d, ok := ParseRateLimit(v)
		if ok != exhausted || d != want {
			t.Fatalf("ParseRateLimit(%q) = %v, %v; want %v, %v", v, d, ok, want, exhausted)
		}
	})
}

// Every wait drawn without a server hint lies in [MinDelay, ceiling], where
// the ceiling is min(MaxDelay, BaseDelay·2^(n-1)) but never below
// MinDelay: no retry is ever immediate.
func TestPropJitterBounds(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		base := time.Duration(rapid.Int64Range(1, int64(time.Hour)).Draw(t, "base"))
		maxDelay := time.Duration(rapid.Int64Range(1, int64(24*time.Hour)).Draw(t, "max"))
		minDelay := time.Duration(rapid.Int64Range(1, int64(maxDelay)).Draw(t, "min"))
		retry := rapid.IntRange(1, 100).Draw(t, "retry")
		r := rapid.Float64Range(0, 1).Draw(t, "r")
		d := jitter(base, minDelay, maxDelay, retry, r)
		ceiling := maxDelay
		if retry-1 < 62 && base <= maxDelay>>(retry-1) {
			ceiling = min(maxDelay, base<<(retry-1))
		}
		if d <= 0 || d < minDelay || d > max(minDelay, ceiling) {
			t.Fatalf("jitter(%v, %v, %v, %d, %v) = %v, want in [%v, %v]", base, minDelay, maxDelay, retry, r, d, minDelay, max(minDelay, ceiling))
		}
	})
}
