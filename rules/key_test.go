package rules

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestAppendKey: keys are the values themselves when short, length
// prefixed when several, hashed when long or not UTF-8, and distinct
// values give distinct keys.
func TestAppendKey(t *testing.T) {
	long := strings.Repeat("x", MaxKeyAttrLen+1)
	for _, tc := range []struct {
		name   string
		values []string
		want   string
	}{
		{"one value", []string{"acme"}, "acme"},
		{"two values", []string{"acme", "/v1"}, "\x04acme\x03/v1"},
		{"empty", []string{""}, ""},
	} {
		if got := string(AppendKey(nil, tc.values...)); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	seen := map[string][]string{}
	for _, vs := range [][]string{{long}, {long + "y"}, {"a\x00b", "c"}, {"a", "b\x00c"}, {"\xff"}, {"\xfe"}, {long, "a"}, {long + "y", "a"}} {
		k := string(AppendKey(nil, vs...))
		if !utf8.ValidString(k) || len(k) > 2*MaxKeyAttrLen {
			t.Errorf("%q: key %q is not short valid UTF-8", vs, k)
		}
		if prev, dup := seen[k]; dup {
			t.Errorf("%q and %q share the key %q", prev, vs, k)
		}
		seen[k] = vs
	}
	many := make([]string, MaxDescriptorEntries)
	for i := range many {
		many[i] = strings.Repeat("v", 100)
	}
	if k := AppendDescriptorKey(nil, many...); len(k) > MaxDescriptorKeyLen {
		t.Errorf("descriptor key of %d bytes; at most %d", len(k), MaxDescriptorKeyLen)
	}
	if a, b := AppendDescriptorKey(nil, "x"), AppendKey(nil, "x"); string(a) != string(b) {
		t.Errorf("a short descriptor key %q differs from AppendKey's %q", a, b)
	}
}
