package envoyconf

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

var errorTests = []struct {
	name  string
	files []File
	want  []string // each a substring of one error, in order
}{
	{
		// Source: envoyproxy/ratelimit test/config/misspelled_key.yaml.
		name:  "unknown field",
		files: files("misspelled_key.yaml", "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    ratelimit:\n      unit: day\n      requests_per_unit: 5\n"),
		want:  []string{`misspelled_key.yaml:5: domain test-domain: descriptors[0]: unknown field "ratelimit" (did you mean rate_limit?)`},
	},
	{
		// Source: envoyproxy/ratelimit test/config/misspelled_key2.yaml.
		name:  "unknown rate_limit field",
		files: files("misspelled_key2.yaml", "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    rate_limit:\n      unit: day\n      requestsperunit: 5\n"),
		want: []string{
			`misspelled_key2.yaml:7: domain test-domain: descriptors[0].rate_limit: unknown field "requestsperunit" (did you mean requests_per_unit?)`,
			`misspelled_key2.yaml:5: domain test-domain: descriptors[0].rate_limit: requests_per_unit: is missing`,
		},
	},
	{
		name:  "field in the wrong place",
		files: files("misplaced.yaml", "domain: d\ndescriptors:\n  - key: k\n    unit: second\n    rate_limit: {unit: second, requests_per_unit: 1, shadow_mode: true}\n"),
		want: []string{
			`misplaced.yaml:4: domain d: descriptors[0]: unknown field "unit" (it belongs in a descriptor's rate_limit:)`,
			`misplaced.yaml:5: domain d: descriptors[0].rate_limit: unknown field "shadow_mode" (it belongs in a descriptor, under descriptors:)`,
		},
	},
	{
		// Source: envoyproxy/ratelimit test/config/bad_limit_unit.yaml.
		name:  "bad unit",
		files: files("bad_limit_unit.yaml", "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    rate_limit:\n      unit: foo\n      requests_per_unit: 5\n"),
		want:  []string{`bad_limit_unit.yaml:6: domain test-domain: descriptors[0].rate_limit.unit: invalid rate limit unit "foo" (want second, minute, hour, day, week, month or year)`},
	},
	{
		name:  "missing unit",
		files: files("no_unit.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      requests_per_unit: 5\n"),
		want:  []string{`no_unit.yaml:4: domain d: descriptors[0].rate_limit: unit: is missing`},
	},
	{
		// Source: envoyproxy/ratelimit test/config/unlimited_with_unit.yaml.
		name:  "unlimited with unit and requests_per_unit",
		files: files("unlimited_with_unit.yaml", "domain: test-domain\ndescriptors:\n  - key: foo\n    rate_limit:\n      unlimited: true\n      unit: day\n      requests_per_unit: 25\n"),
		want: []string{
			`unlimited_with_unit.yaml:6: domain test-domain: descriptors[0].rate_limit.unit: an unlimited rate limit has no unit`,
			`unlimited_with_unit.yaml:7: domain test-domain: descriptors[0].rate_limit.requests_per_unit: an unlimited rate limit has no requests_per_unit`,
		},
	},
	{
		// Source: envoyproxy/ratelimit test/config/duplicate_domain.yaml,
		// loaded after basic_config.yaml as its test does.
		name:  "duplicate domain",
		files: files("basic_config.yaml", basicConfig, "duplicate_domain.yaml", "domain: test-domain\ndescriptors:\n"),
		want:  []string{`duplicate_domain.yaml:1: domain test-domain: is also the domain of basic_config.yaml:2; ratelimit refuses one domain in two files`},
	},
	{
		// Source: envoyproxy/ratelimit test/config/empty_key.yaml.
		name:  "missing key",
		files: files("empty_key.yaml", "domain: test-domain\ndescriptors:\n  - value: value1\n"),
		want:  []string{`empty_key.yaml:3: domain test-domain: descriptors[0]: key: is missing`},
	},
	{
		name:  "empty key",
		files: files("empty_key2.yaml", "domain: d\ndescriptors:\n  - key: \"\"\n    rate_limit: {unit: second, requests_per_unit: 1}\n"),
		want:  []string{`empty_key2.yaml:3: domain d: descriptors[0].key: is empty`},
	},
	{
		// Source: envoyproxy/ratelimit test/config/empty_domain.yaml.
		name:  "missing domain",
		files: files("empty_domain.yaml", "descriptors:\n"),
		want:  []string{`empty_domain.yaml:1: domain: is missing`},
	},
	{
		// Source: envoyproxy/ratelimit README.md, Example 3.
		name:  "zero requests_per_unit",
		files: files("edge_proxy_per_ip.yaml", "domain: edge_proxy_per_ip\ndescriptors:\n  - key: remote_address\n    rate_limit:\n      unit: second\n      requests_per_unit: 10\n\n  # Black list IP\n  - key: remote_address\n    value: 50.0.0.5\n    rate_limit:\n      unit: second\n      requests_per_unit: 0\n"),
		want:  []string{`edge_proxy_per_ip.yaml:13: domain edge_proxy_per_ip: descriptors[1].rate_limit.requests_per_unit: is 0: ratelimit refuses every request it matches (a ban)`},
	},
	{
		name:  "missing requests_per_unit",
		files: files("no_rpu.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second}\n"),
		want:  []string{`no_rpu.yaml:4: domain d: descriptors[0].rate_limit: requests_per_unit: is missing; ratelimit reads that as 0, a ban`},
	},
	{
		name:  "negative requests_per_unit",
		files: files("negative.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: -5\n"),
		want:  []string{`negative.yaml:6: domain d: descriptors[0].rate_limit.requests_per_unit: must not be negative, got -5`},
	},
	{
		name: "requests_per_unit not a uint32",
		files: files("numbers.yaml", "domain: d\ndescriptors:\n"+
			"  - {key: a, rate_limit: {unit: second, requests_per_unit: 4294967296}}\n"+
			"  - {key: b, rate_limit: {unit: second, requests_per_unit: 1.5}}\n"+
			"  - {key: c, rate_limit: {unit: second, requests_per_unit: \"5\"}}\n"),
		want: []string{
			`numbers.yaml:3: domain d: descriptors[0].rate_limit.requests_per_unit: must be at most 4294967295`,
			`numbers.yaml:4: domain d: descriptors[1].rate_limit.requests_per_unit: want a whole number of requests, got float "1.5"`,
			`numbers.yaml:5: domain d: descriptors[2].rate_limit.requests_per_unit: want a whole number of requests, got str "5"`,
		},
	},
	{
		name:  "empty file",
		files: files("empty.yaml", ""),
		want:  []string{`empty.yaml:1: file is empty`},
	},
	{
		name:  "comments only",
		files: files("comments.yaml", "# nothing yet\n"),
		want:  []string{`comments.yaml:1: file is empty`},
	},
	{
		// Source: envoyproxy/ratelimit test/config/duplicate_key.yaml.
		name:  "duplicate descriptor",
		files: files("duplicate_key.yaml", "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n\n  - key: key1\n    value: value1\n"),
		want:  []string{`duplicate_key.yaml:6: domain test-domain: descriptors[1]: duplicate descriptor "key1_value1" (also descriptors[0] at line 3)`},
	},
	{
		// Source: envoyproxy/ratelimit test/config/non_map_list.yaml.
		name:  "list of non-mappings",
		files: files("non_map_list.yaml", "domain: test-domain\ndescriptors:\n  - a\n  - b\n  - c\n"),
		want: []string{
			`non_map_list.yaml:3: domain test-domain: descriptors[0]: want a descriptor (a mapping with key:), got str "a"`,
			`non_map_list.yaml:4: domain test-domain: descriptors[1]: want a descriptor`,
			`non_map_list.yaml:5: domain test-domain: descriptors[2]: want a descriptor`,
		},
	},
	{
		// Source: envoyproxy/ratelimit test/config/non_string_key.yaml.
		name:  "non-string key",
		files: files("non_string_key.yaml", "0.25: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    rate_limit:\n      unit: day\n      requests_per_unit: 5\n"),
		want:  []string{`non_string_key.yaml:1: unknown field "0.25"`, `non_string_key.yaml:1: domain: is missing`},
	},
	{
		// Source: envoyproxy/ratelimit test/config/replaces_empty.yaml.
		name:  "empty replaces name",
		files: files("replaces_empty.yaml", "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    descriptors:\n      - key: subkey1\n        rate_limit:\n          name: self\n          replaces:\n            - name:\n          unit: second\n          requests_per_unit: 5\n"),
		want:  []string{`replaces_empty.yaml:10: domain test-domain: descriptors[0].descriptors[0].rate_limit.replaces[0]: name is empty`},
	},
	{
		// Source: envoyproxy/ratelimit test/config/replaces_self.yaml.
		name:  "replaces itself",
		files: files("replaces_self.yaml", "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    descriptors:\n      - key: subkey1\n        rate_limit:\n          name: self\n          replaces:\n            - name: self\n          unit: second\n          requests_per_unit: 5\n"),
		want:  []string{`replaces_self.yaml:10: domain test-domain: descriptors[0].descriptors[0].rate_limit.replaces[0]: "self" is this rate limit's own name`},
	},
	{
		// Source: envoyproxy/ratelimit test/config/bad_yaml.yaml.
		name:  "bad YAML",
		files: files("bad_yaml.yaml", "'''\n"),
		want:  []string{`bad_yaml.yaml:2: found unexpected end of stream`},
	},
	{
		name:  "YAML syntax error",
		files: files("syntax.yaml", "domain: d\ndescriptors:\n  - key: a\n   value: b\n"),
		want:  []string{`syntax.yaml:2: did not find expected '-' indicator`},
	},
	{
		// Source: envoyproxy/ratelimit README.md, Example 9.
		name:  "wildcard inside a value",
		files: files("example9.yaml", "domain: example9\ndescriptors:\n  - key: path\n    value: /api/*/action\n    rate_limit:\n      unit: minute\n      requests_per_unit: 20\n"),
		want:  []string{`example9.yaml:4: domain example9: descriptors[0].value: "/api/*/action": ratelimit matches a '*' inside a value as a glob`},
	},
	{
		name:  "wildcard in a key",
		files: files("wildkey.yaml", "domain: d\ndescriptors:\n  - key: a*\n    rate_limit: {unit: second, requests_per_unit: 1}\n"),
		want:  []string{`wildkey.yaml:3: domain d: descriptors[0].key: "a*": ratelimit reads a '*' in a key as a wildcard`},
	},
	{
		// Source: envoyproxy/ratelimit README.md, Example 11.
		name:  "share_threshold",
		files: files("example11.yaml", "domain: example11\ndescriptors:\n  # With share_threshold: true, all files/* matches share the same threshold\n  - key: files\n    value: files/*\n    share_threshold: true\n    rate_limit:\n      unit: hour\n      requests_per_unit: 10\n\n  # Without share_threshold, each files_no_share/* match has its own isolated threshold\n  - key: files_no_share\n    value: files_no_share/*\n    share_threshold: false\n    rate_limit:\n      unit: hour\n      requests_per_unit: 10\n"),
		want:  []string{`example11.yaml:6: domain example11: descriptors[0].share_threshold: ratelimit counts every value matching "files/*" in one counter`},
	},
	{
		name:  "share_threshold without a wildcard",
		files: files("share.yaml", "domain: d\ndescriptors:\n  - key: a\n    value: b\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n"),
		want:  []string{`share.yaml:5: domain d: descriptors[0].share_threshold: applies only to a wildcard value`},
	},
	{
		// Source: envoyproxy/ratelimit examples/ratelimit/config/example.yaml
		// (the service_1 descriptor).
		name:  "quota_mode and metadata",
		files: files("quota.yaml", "domain: rl\ndescriptors:\n  - key: service\n    value: service_1\n    quota_mode: true\n    rate_limit:\n      unit: minute\n      requests_per_unit: 1\n    metadata:\n      service_with_quota:\n        name: \"service_1\"\n"),
		want: []string{
			`quota.yaml:5: domain rl: descriptors[0].quota_mode: ratelimit refuses a request only when every quota_mode descriptor`,
			`quota.yaml:9: domain rl: descriptors[0].metadata: ratelimit returns it to Envoy as dynamic metadata`,
		},
	},
	{
		name:  "two documents",
		files: files("two.yaml", "domain: a\ndescriptors:\n---\ndomain: b\n"),
		want:  []string{`two.yaml:3: holds more than one YAML document`},
	},
	{
		name:  "field given twice",
		files: files("twice.yaml", "domain: a\ndomain: b\n"),
		want:  []string{`twice.yaml:2: field "domain" is given twice (first at line 1)`},
	},
	{
		name:  "wrong types",
		files: files("types.yaml", "domain: [a]\ndescriptors: {key: a}\n"),
		want:  []string{`types.yaml:1: domain: want a string, got a list`},
	},
	{
		name:  "not UTF-8",
		files: files("latin1.yaml", "domain: d\ndescriptors:\n  - key: caf\xe9\n"),
		want:  []string{`latin1.yaml:3: is not valid UTF-8`},
	},
	{
		name:  "too deep",
		files: files("deep.yaml", deepConfig(17)),
		want:  []string{`deep.yaml:35: domain deep: descriptors[0]` + strings.Repeat(".descriptors[0]", 16) + `: is 17 descriptors deep; an Allot descriptor rule matches at most 16 entries`},
	},
	{
		name:  "domain too long",
		files: files("long.yaml", "domain: "+strings.Repeat("d", 257)+"\n"),
		want:  []string{`long.yaml:1: domain: is 257 bytes`},
	},
}

// deepConfig is a domain with one rate limit depth descriptors deep.
func deepConfig(depth int) string {
	var b strings.Builder
	b.WriteString("domain: deep\ndescriptors:\n")
	for i := range depth {
		pad := strings.Repeat(" ", 4*i)
		fmt.Fprintf(&b, "%s  - key: k%d\n", pad, i)
		if i < depth-1 {
			fmt.Fprintf(&b, "%s    descriptors:\n", pad)
		} else {
			fmt.Fprintf(&b, "%s    rate_limit: {unit: second, requests_per_unit: 1}\n", pad)
		}
	}
	return b.String()
}

func TestImportErrors(t *testing.T) {
	for _, tt := range errorTests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := Import(tt.files, Options{})
			if err == nil {
				t.Fatalf("no error; rules %v", got)
			}
			if got != nil {
				t.Errorf("rules %v with the error", got)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("%v: not ErrInvalid", err)
			}
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("%T, want Errors", err)
			}
			var msgs []string
			for _, e := range es {
				msgs = append(msgs, strings.TrimPrefix(e.Error(), "envoyconf: "))
				if e.File == "" || e.Line == 0 {
					t.Errorf("%q names no file and line", e.Error())
				}
			}
			if len(msgs) != len(tt.want) {
				t.Errorf("errors:\n\t%s\nwant %d", strings.Join(msgs, "\n\t"), len(tt.want))
			}
			for i, want := range tt.want {
				if i < len(msgs) && !strings.Contains(msgs[i], want) {
					t.Errorf("error %d: %q\nwant it to contain %q", i, msgs[i], want)
				}
			}
		})
	}
}
