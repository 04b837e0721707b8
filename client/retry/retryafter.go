package retry

import (
	"math"
	"net/http"
	"strings"
	"time"
)

// maxSeconds is the largest number of seconds a time.Duration can hold;
// longer waits saturate to the largest Duration.
const maxSeconds = math.MaxInt64 / int64(time.Second)

// ParseRetryAfter parses a Retry-After field value as RFC 9110 section
// 10.2.3 defines it: either delay-seconds, a non-negative decimal integer
// (`Retry-After: 120`), or an HTTP-date in any of the three formats
// http.ParseTime accepts, which it turns into a wait from now. A date in the
// past means no wait. Surrounding spaces and tabs are ignored. ok is false
// for anything else, including signs, fractions and units.
func ParseRetryAfter(value string, now time.Time) (wait time.Duration, ok bool) {
	v := trimOWS(value)
	if d, ok := parseSeconds(v); ok {
		return d, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}

// ParseRateLimit parses a RateLimit field value as the IETF draft
// "RateLimit header fields for HTTP" defines it: a structured-field List of
// quota policies, each with parameters r (remaining quota) and t (seconds
// until the quota resets), e.g. `"default";r=0;t=30`. It returns the wait
// until every exhausted policy (r=0) has reset: the largest t among them.
// ok is false when the value is not a valid List or no policy with a t is
// exhausted.
func ParseRateLimit(value string) (wait time.Duration, ok bool) {
	members, valid := parseList(value)
	if !valid {
		return 0, false
	}
	for _, params := range members {
		r, rok := params["r"]
		t, tok := params["t"]
		if !rok || !tok || !r.integer || !t.integer || r.n != 0 || t.n < 0 {
			continue
		}
		// t has at most 15 digits, well within maxSeconds.
		wait = max(wait, time.Duration(t.n)*time.Second)
		ok = true
	}
	return wait, ok
}

// HeaderWait returns how long the server asked the client to wait, from
// the first of these fields that is present and valid:
//
//   - Retry-After, in seconds or as an HTTP-date (see ParseRetryAfter);
//   - RateLimit, the t of its exhausted policies (see ParseRateLimit); all
//     RateLimit lines are read as one List;
//   - RateLimit-Reset, in seconds, from earlier drafts.
//
// ok is false when none is.
func HeaderWait(h http.Header, now time.Time) (wait time.Duration, ok bool) {
	if v := h.Get("Retry-After"); v != "" {
		if d, ok := ParseRetryAfter(v, now); ok {
			return d, true
		}
	}
	if vs := h.Values("RateLimit"); len(vs) > 0 {
		if d, ok := ParseRateLimit(strings.Join(vs, ", ")); ok {
			return d, true
		}
	}
	if v := h.Get("RateLimit-Reset"); v != "" {
		if d, ok := parseSeconds(trimOWS(v)); ok {
			return d, true
		}
	}
	return 0, false
}

// parseSeconds parses 1*DIGIT as a number of seconds, saturating at the
// largest Duration.
func parseSeconds(s string) (time.Duration, bool) {
	if s == "" {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if n <= maxSeconds { // stop growing once past the limit; keep checking digits
			n = n*10 + int64(c-'0')
		}
	}
	if n > maxSeconds {
		return time.Duration(math.MaxInt64), true
	}
	return time.Duration(n) * time.Second, true
}

// trimOWS removes the optional whitespace (spaces and tabs) around a field
// value.
func trimOWS(s string) string { return strings.Trim(s, " \t") }
