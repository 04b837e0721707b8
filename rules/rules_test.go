package rules

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
)

func TestExampleFileIsValid(t *testing.T) {
	rs, err := Load("../docs/examples/rules.yaml")
	if err != nil {
		t.Fatalf("docs/examples/rules.yaml: %v", err)
	}
	set, err := NewSet(1, rs)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, r := range set.Rules() {
		order = append(order, r.Scope.String())
	}
	if got := strings.Join(order, ","); got != "global,ip,tenant,user,route" {
		t.Errorf("evaluation order %s, want cheapest first: global,ip,tenant,user,route", got)
	}
	quota, _ := set.Get("plan-quota")
	if quota.Intent != lease.Quota || quota.Algorithm != algo.SlidingWindow || quota.Period != time.Minute {
		t.Errorf("plan-quota decoded as %+v", quota)
	}
	if got := quota.LimitFor("acme", "pro"); got != 900000 {
		t.Errorf("tenant override: LimitFor(acme) = %d", got)
	}
	if got := quota.LimitFor("other", "pro"); got != 60000 {
		t.Errorf("plan limit: LimitFor(other, pro) = %d", got)
	}
	if got := quota.LimitFor("other", "unknown-plan"); got != 1200 {
		t.Errorf("rule limit: %d", got)
	}
	capRule, _ := set.Get("api-capacity")
	if capRule.WeightFor("x", "enterprise") != 10 || capRule.RankFor("pro") != 1 || capRule.Tol() != 0.03 || capRule.Mode() != lease.FailFallback {
		t.Errorf("api-capacity: weight %v rank %v tol %v mode %v", capRule.WeightFor("x", "enterprise"), capRule.RankFor("pro"), capRule.Tol(), capRule.Mode())
	}
}

// TestParseErrors checks that each kind of mistake is reported with the
// file, the line and the field.
func TestParseErrors(t *testing.T) {
	const head = "rules:\n  - name: r1\n    scope: tenant\n    algorithm: gcra\n    intent: quota\n"
	tests := []struct {
		name  string
		src   string
		line  int
		field string
		msg   string
	}{
		{"unknown field", head + "    limit: 10\n    period: 1s\n    burstt: 5\n", 8, "burstt", "unknown field"},
		{"missing limit", head + "    period: 1s\n", 2, "limit", "is required"},
		{"negative period", head + "    limit: 10\n    period: -1s\n", 7, "period", "must be positive"},
		{"period without unit", head + "    limit: 10\n    period: 60\n", 7, "period", `"60": a duration needs a unit: 60s, 60m or 60h`},
		{"unknown algorithm", "rules:\n  - name: r1\n    algorithm: leaky\n", 3, "algorithm", "unknown algorithm \"leaky\""},
		{"unknown intent", head + "    limit: 10\n    period: 1s\n    fail_mode: sometimes\n", 8, "fail_mode", "unknown fail mode"},
		{"burst on a window", "rules:\n  - name: w\n    scope: tenant\n    algorithm: fixed_window\n    limit: 5\n    period: 1s\n    burst: 3\n    intent: quota\n", 7, "burst", "applies only to token_bucket and gcra"},
		{"bad plan limit", head + "    limit: 10\n    period: 1s\n    plans:\n      pro: {limit: -4}\n", 9, "plans.pro.limit", "must not be negative"},
		{"duplicate name", head + "    limit: 10\n    period: 1s\n" + strings.Replace(head[len("rules:\n"):], "r1", "r1", 1) + "    limit: 5\n    period: 1s\n", 8, "name", "duplicate rule name"},
		{"tolerance out of range", head + "    limit: 10\n    period: 1s\n    tolerance: 3\n", 8, "tolerance", "between 0 and 1"},
		{"global rule with a key", "rules:\n  - name: g\n    scope: global\n    key: [tenant]\n    algorithm: gcra\n    limit: 1\n    period: 1s\n    intent: capacity\n", 4, "key", "global rule"},
		{"regions over one", head + "    limit: 10\n    period: 1s\n    regions: {eu: 0.7, us: 0.6}\n", 8, "regions", "add up"},
		{"two documents", head + "    limit: 10\n    period: 1s\n---\nrules: []\n", 0, "", "more than one YAML document"},
		{"not yaml", "rules: [\n", 0, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("rules.yaml", []byte(tt.src))
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("%v does not wrap ErrInvalid", err)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("%v is not an *Error", err)
			}
			if e.File != "rules.yaml" || (tt.line != 0 && e.Line != tt.line) || e.Field != tt.field || !strings.Contains(e.Msg, tt.msg) {
				t.Errorf("got file %q line %d field %q msg %q; want line %d field %q msg containing %q\n(%v)", e.File, e.Line, e.Field, e.Msg, tt.line, tt.field, tt.msg, err)
			}
			if !strings.HasPrefix(err.Error(), "rules: rules.yaml") {
				t.Errorf("message %q does not start with the file", err)
			}
		})
	}
}

// TestParseFirstDayMistakes: what people write the first time, reported
// by rule and field with what to write instead, not as the YAML decoder's
// errors.
func TestParseFirstDayMistakes(t *testing.T) {
	const rule = "  - name: daily\n    scope: tenant\n    algorithm: fixed_window\n    limit: 5\n    period: 1m\n    intent: quota\n"
	tests := []struct {
		name, src string
		want      []string // every error, in order
	}{
		{"period in days", "rules:\n" + strings.Replace(rule, "1m", "1d", 1),
			[]string{`rules: rules.yaml:6: rule daily: period: "1d": Go durations have no d; use 24h`}},
		{"period in weeks", "rules:\n" + strings.Replace(rule, "1m", "2w", 1),
			[]string{`rules: rules.yaml:6: rule daily: period: "2w": Go durations have no w; use 336h`}},
		{"period in words", "rules:\n" + strings.Replace(rule, "1m", "1 minute", 1),
			[]string{`rules: rules.yaml:6: rule daily: period: "1 minute": not a duration: write a number and a unit (ns, us, ms, s, m or h), such as 500ms, 90s, 1m or 24h`}},
		{"two bad periods and an unknown field", "rules:\n" + strings.Replace(rule, "1m", "1d", 1) + strings.Replace(strings.Replace(rule, "daily", "weekly", 1), "1m", "7d", 1) + "    colour: red\n",
			[]string{`rules: rules.yaml:6: rule daily: period: "1d": Go durations have no d; use 24h`,
				`rules: rules.yaml:12: rule weekly: period: "7d": Go durations have no d; use 168h`,
				`rules: rules.yaml:14: colour: unknown field`}},
		{"no rules: above a list", rule,
			[]string{`rules: rules.yaml:1: want a top-level rules: list (this file is a list: put "rules:" on a line of its own above it)`}},
		{"one rule, no list", "name: daily\nscope: tenant\nlimit: 5\n",
			[]string{`rules: rules.yaml:1: want a top-level rules: list (name is a rule's field: put the rule under rules: as a list item, "- name: ...")`}},
		{"something else", "limits:\n" + rule, []string{`rules: rules.yaml:1: want a top-level rules: list`}},
		{"a scalar", "hello\n", []string{`rules: rules.yaml:1: want a top-level rules: list`}},
		{"rules a mapping", "rules:\n  name: daily\n", []string{`rules: rules.yaml:1: rules: want a list of rules, got a mapping: start each rule with "- "`}},
		{"rules twice", "rules:\n" + rule + "rules:\n" + strings.Replace(rule, "daily", "other", 1),
			[]string{`rules: rules.yaml:8: rules is given twice (first on line 1); put every rule under one top-level rules: list`}},
		{"a field twice", "rules:\n" + strings.Replace(rule, "    limit: 5\n", "    limit: 5\n    limit: 50\n", 1),
			[]string{`rules: rules.yaml:6: rule daily: limit: is given twice (first on line 5)`}},
		{"a plan field twice", "rules:\n" + rule + "    plans:\n      pro: {limit: 9, limit: 10}\n",
			[]string{`rules: rules.yaml:9: rule daily: plans.pro.limit: is given twice (first on line 9)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("rules.yaml", []byte(tt.src))
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("%v does not wrap ErrInvalid", err)
			}
			if got := strings.Split(err.Error(), "\n"); strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", err, strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestEmptyFileHasNoRules(t *testing.T) {
	for _, src := range []string{"", "rules: []\n", "# nothing yet\n", "rules:\n", "---\n"} {
		rs, err := Parse("empty.yaml", []byte(src))
		if err != nil || len(rs) != 0 {
			t.Errorf("%q: %v, %d rules", src, err, len(rs))
		}
	}
}

func TestMatches(t *testing.T) {
	r := Rule{Match: Match{Routes: []string{"/v1/search*", "/health"}, Plans: []string{"free", "pro"}}}
	for _, tt := range []struct {
		tenant, plan, route string
		want                bool
	}{
		{"a", "free", "/v1/search", true},
		{"a", "pro", "/v1/search/deep", true},
		{"a", "pro", "/health", true},
		{"a", "pro", "/healthz", false},
		{"a", "enterprise", "/v1/search", false},
		{"a", "free", "/v1/other", false},
	} {
		if got := r.Matches(tt.tenant, tt.plan, tt.route); got != tt.want {
			t.Errorf("Matches(%q, %q, %q) = %v", tt.tenant, tt.plan, tt.route, got)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("rules:\n  - name: a\n    scope: tenant\n    algorithm: gcra\n    limit: 5\n    period: 1s\n    intent: quota\n"))
	f.Add([]byte("rules: [{name: x, scope: global, algorithm: fixed_window, limit: 1, period: 1h, intent: abuse, plans: {p: {rank: 99}}}]"))
	f.Add([]byte("&a [*a, *a]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, err := Parse("fuzz.yaml", data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error does not wrap ErrInvalid: %v", err)
			}
			return
		}
		if _, err := NewSet(1, rs); err != nil {
			t.Fatalf("Parse accepted rules NewSet rejects: %v", err)
		}
		// Whatever parses, written out, reads back as the same rules.
		var out bytes.Buffer
		if err := WriteYAML(&out, rs); err != nil {
			t.Fatal(err)
		}
		back, err := Parse("written.yaml", out.Bytes())
		if err != nil || len(back) != len(rs) {
			t.Fatalf("written rules do not read back: %v\n%s", err, out.String())
		}
		for i := range rs {
			if !Equal(&back[i], &rs[i]) {
				t.Fatalf("rule %s changed when written:\n%+v\n%+v", rs[i].Name, back[i], rs[i])
			}
		}
	})
}
