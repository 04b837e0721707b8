package rules

import (
	"strings"
	"testing"
)

// TestDescriptorRules: descriptor rules parse, and each mistake is
// refused naming its field and line. (proto/rulespb's
// TestDescriptorRulesOnTheWire sends the same rules over the wire.)
func TestDescriptorRules(t *testing.T) {
	const ok = `rules:
  - name: per-ip
    scope: descriptor
    match: {domain: edge, descriptors: [{key: remote_address}]}
    algorithm: fixed_window
    limit: 10
    period: 1s
    intent: abuse
    shadow: true
  - name: office
    scope: descriptor
    match: {domain: edge, descriptors: [{key: remote_address, value: 10.0.0.1}]}
    unlimited: true
    replaces: [per-ip]
`
	rs, err := Parse("ok.yaml", []byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	if got := rs[0].KeyAttrs(); len(got) != 1 || got[0] != AttrDescriptor {
		t.Errorf("default key %v, want [descriptor]", got)
	}

	const head = "rules:\n  - name: d\n    scope: descriptor\n"
	const limit = "    algorithm: fixed_window\n    limit: 1\n    period: 1s\n    intent: quota\n"
	for _, tc := range []struct {
		name, src, field, msg string
	}{
		{"no domain", head + "    match: {descriptors: [{key: a}]}\n" + limit, "match.domain", "is required"},
		{"no entries", head + "    match: {domain: e}\n" + limit, "match.descriptors", "1–16 entries"},
		{"empty key", head + "    match: {domain: e, descriptors: [{value: x}]}\n" + limit, "match.descriptors[0].key", "1–256 bytes"},
		{"star inside", head + "    match: {domain: e, descriptors: [{key: a, value: 'x*y'}]}\n" + limit, "match.descriptors[0].value", "only at the end"},
		{"routes too", head + "    match: {domain: e, descriptors: [{key: a}], routes: [/x]}\n" + limit, "match", "descriptors only"},
		{"tenant key", head + "    key: [tenant]\n    match: {domain: e, descriptors: [{key: a}]}\n" + limit, "key[0]", "descriptor alone"},
		{"plans", head + "    match: {domain: e, descriptors: [{key: a}]}\n" + limit + "    plans: {pro: {limit: 5}}\n", "plans", "no tenants"},
		{"unlimited with a limit", head + "    match: {domain: e, descriptors: [{key: a}]}\n    unlimited: true\n    limit: 5\n", "limit", "no limit"},
		{"replaces itself", head + "    match: {domain: e, descriptors: [{key: a}]}\n" + limit + "    replaces: [d]\n", "replaces[0]", "another rule"},
		{"domain on a tenant rule", "rules:\n  - name: t\n    scope: tenant\n    match: {domain: e}\n" + limit, "match.domain", "only a descriptor rule"},
		{"unlimited tenant rule", "rules:\n  - name: t\n    scope: tenant\n    unlimited: true\n", "unlimited", "only a descriptor rule"},
		{"descriptor key on a tenant rule", "rules:\n  - name: t\n    scope: tenant\n    key: [descriptor]\n" + limit, "key[0]", "only a descriptor rule"},
		{"replaces no rule", head + "    match: {domain: e, descriptors: [{key: a}]}\n" + limit + "    replaces: [ghost]\n", "replaces[0]", "names no rule"},
		{"the same match twice", head + "    match: {domain: e, descriptors: [{key: a, value: x}]}\n" + limit + "  - name: d2\n    scope: descriptor\n    match: {domain: e, descriptors: [{key: a, value: x}]}\n" + limit, "match.descriptors", "same domain and descriptors"},
	} {
		_, err := Parse("bad.yaml", []byte(tc.src))
		if err == nil {
			t.Errorf("%s: accepted", tc.name)
			continue
		}
		if !strings.Contains(err.Error(), tc.field+": ") || !strings.Contains(err.Error(), tc.msg) || !strings.Contains(err.Error(), "bad.yaml:") {
			t.Errorf("%s: %v; want bad.yaml:line, field %s, %q", tc.name, err, tc.field, tc.msg)
		}
	}
}

// TestDescriptorEntryMatch: an entry matches its key with an exact value,
// a prefix or any value, and ranks them in that order.
func TestDescriptorEntryMatch(t *testing.T) {
	for _, tc := range []struct {
		e          DescriptorEntry
		key, value string
		match      bool
		rank       int
	}{
		{DescriptorEntry{"path", "/foo"}, "path", "/foo", true, 0},
		{DescriptorEntry{"path", "/foo"}, "path", "/foo/bar", false, 0},
		{DescriptorEntry{"path", "/foo*"}, "path", "/foo/bar", true, 1},
		{DescriptorEntry{"path", "/foo*"}, "path", "/fo", false, 1},
		{DescriptorEntry{"path", "*"}, "path", "", true, 1},
		{DescriptorEntry{"path", ""}, "path", "anything", true, 2},
		{DescriptorEntry{"path", ""}, "other", "anything", false, 2},
	} {
		if got := tc.e.Matches(tc.key, tc.value); got != tc.match {
			t.Errorf("%+v.Matches(%q, %q) = %v", tc.e, tc.key, tc.value, got)
		}
		if got := tc.e.Specificity(); got != tc.rank {
			t.Errorf("%+v.Specificity() = %d, want %d", tc.e, got, tc.rank)
		}
	}
}
