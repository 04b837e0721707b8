package retry

import (
	"math"
	"net/http"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	const s = time.Second
	tests := []struct {
		in     string
		want   time.Duration
		wantOK bool
	}{
		{"0", 0, true},
		{"12", 12 * s, true},
		{"007", 7 * s, true},
		{" 12\t", 12 * s, true},
		{"9223372036", 9223372036 * s, true},
		{"9223372037", time.Duration(math.MaxInt64), true}, // saturates
		{"99999999999999999999999999", time.Duration(math.MaxInt64), true},
		{t0.Add(90 * s).Format(http.TimeFormat), 90 * s, true},
		{t0.Add(90 * s).Format(time.RFC850), 90 * s, true},
		{t0.Add(90 * s).Format(time.ANSIC), 90 * s, true},
		{t0.Add(-90 * s).Format(http.TimeFormat), 0, true},
		{"", 0, false},
		{" ", 0, false},
		{"-1", 0, false},
		{"+5", 0, false},
		{"1.5", 0, false},
		{"5s", 0, false},
		{"1 2", 0, false},
		{"0x10", 0, false},
		{"١٢", 0, false}, // Arabic-Indic digits are not DIGIT
		{"soon", 0, false},
		{"Sat, 14 Mar 2026 15:09:26", 0, false}, // no zone
		{"2026-03-14T15:09:26Z", 0, false},      // RFC 3339 is not an HTTP-date
	}
	for _, tt := range tests {
		got, ok := ParseRetryAfter(tt.in, t0)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestParseRateLimit(t *testing.T) {
	const s = time.Second
	tests := []struct {
		in     string
		want   time.Duration
		wantOK bool
	}{
		{`"default";r=0;t=30`, 30 * s, true},
		{`default;r=0;t=30`, 30 * s, true}, // a token name
		{`"default";t=30;r=0`, 30 * s, true},
		{`"default";r=0;t=0`, 0, true},
		{`"a";r=0;t=2, "b";r=0;t=9, "c";r=1;t=99`, 9 * s, true},
		{`"a";r=0;t=2,"b";r=0;t=9`, 9 * s, true},
		{`"a";r=5;t=2;pk=:cHJpdmF0ZQ==:, "b";r=0;t=4;pk=:Zm9v:`, 4 * s, true},
		{`"a";r=0;t=1;r=3`, 0, false}, // the last r wins
		{`"default";r=3;t=30`, 0, false},
		{`"default";r=0`, 0, false},
		{`"default";t=30`, 0, false},
		{`"default";r=0;t=-1`, 0, false},
		{`"default";r=0;t=1.5`, 0, false},
		{`"default";r=0;t="30"`, 0, false},
		{`"default";r=?0;t=30`, 0, false},
		{`"default";r=0;t=30,`, 0, false},              // trailing comma: invalid List
		{`"default";r=0;t=30, "x`, 0, false},           // unterminated string
		{`"default";R=0;t=30`, 0, false},               // keys are lowercase
		{`"default" ;r=0;t=30`, 0, false},              // no space before ;
		{`"default";r=0;t=1234567890123456`, 0, false}, // 16 digits
		{`(a b);r=0;t=6`, 6 * s, true},                 // an inner list
		{`"x";r=0;t=3;d=@1700000000;e=%"caf%c3%a9";f=?1;g=1.25`, 3 * s, true},
		{``, 0, false},
	}
	for _, tt := range tests {
		got, ok := ParseRateLimit(tt.in)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("ParseRateLimit(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestParseList(t *testing.T) {
	tests := []struct {
		in    string
		valid bool
	}{
		{``, true},
		{`a`, true},
		{`  a ,	b  `, true},
		{`a;x, (1 2.5 "s" tok :AA==: ?0);y=2, @-5, %"x"`, true},
		{`a;*k.-_9=1`, true},
		{`-999999999999999`, true},
		{`999999999999.999`, true},
		{`a,`, false},
		{`,a`, false},
		{`a b`, false},
		{`a;=1`, false},
		{`a;1k=1`, false},
		{`(1 2`, false},
		{`(1 2)x`, false},
		{`(1,2)`, false},
		{`1.`, false},
		{`1.2345`, false},
		{`1234567890123.5`, false},
		{`-`, false},
		{`-a`, false},
		{`"\x"`, false},
		{"\"\x7f\"", false},
		{`:AA=`, false},
		{`:A*:`, false},
		{`?2`, false},
		{`?`, false},
		{`@1.5`, false},
		{`%x`, false},
		{`%"%C3%A9"`, false}, // uppercase hex
		{`%"%ff"`, false},    // not UTF-8
		{`%"%c3`, false},
		{`#`, false},
	}
	for _, tt := range tests {
		if _, ok := parseList(tt.in); ok != tt.valid {
			t.Errorf("parseList(%q) valid = %v, want %v", tt.in, ok, tt.valid)
		}
	}
}

func TestHeaderWait(t *testing.T) {
	const s = time.Second
	tests := []struct {
		name   string
		h      http.Header
		want   time.Duration
		wantOK bool
	}{
		{"none", http.Header{}, 0, false},
		{"Retry-After", http.Header{"Retry-After": {"3"}}, 3 * s, true},
		{"first Retry-After line", http.Header{"Retry-After": {"3", "8"}}, 3 * s, true},
		{"Retry-After beats RateLimit", http.Header{"Retry-After": {"3"}, "Ratelimit": {`"d";r=0;t=9`}}, 3 * s, true},
		{"bad Retry-After falls through", http.Header{"Retry-After": {"x"}, "Ratelimit": {`"d";r=0;t=9`}}, 9 * s, true},
		{"RateLimit lines form one List", http.Header{"Ratelimit": {`"a";r=0;t=2`, `"b";r=0;t=5`}}, 5 * s, true},
		{"RateLimit beats RateLimit-Reset", http.Header{"Ratelimit": {`"d";r=0;t=9`}, "Ratelimit-Reset": {"4"}}, 9 * s, true},
		{"RateLimit with quota left falls through", http.Header{"Ratelimit": {`"d";r=2;t=9`}, "Ratelimit-Reset": {"4"}}, 4 * s, true},
		{"RateLimit-Reset", http.Header{"Ratelimit-Reset": {" 4 "}}, 4 * s, true},
		{"bad RateLimit-Reset", http.Header{"Ratelimit-Reset": {"4.5"}}, 0, false},
	}
	for _, tt := range tests {
		got, ok := HeaderWait(tt.h, t0)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("%s: HeaderWait = %v, %v; want %v, %v", tt.name, got, ok, tt.want, tt.wantOK)
		}
	}
}
