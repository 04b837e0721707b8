package rules_test

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/rules"
	"github.com/allot-io/allot/rules/rulestest"
	"pgregory.net/rapid"
)

// writers are the two forms a rules file is written in.
var writers = map[string]func(*bytes.Buffer, []rules.Rule) error{
	"yaml": func(b *bytes.Buffer, list []rules.Rule) error { return rules.WriteYAML(b, list) },
	"json": func(b *bytes.Buffer, list []rules.Rule) error { return rules.WriteJSON(b, list) },
}

// TestWriteRoundTrip: whatever valid rules are written, in either form,
// Parse reads back as the same rules, field for field.
func TestWriteRoundTrip(t *testing.T) {
	for format, write := range writers {
		t.Run(format, func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				list := rulestest.Rules().Draw(t, "rules")
				var out bytes.Buffer
				if err := write(&out, list); err != nil {
					t.Fatal(err)
				}
				got, err := rules.Parse("out."+format, out.Bytes())
				if err != nil {
					t.Fatalf("%v\n%s", err, out.String())
				}
				if len(got) != len(list) || (len(list) > 0 && !reflect.DeepEqual(got, list)) {
					t.Fatalf("read back:\n%+v\nwant:\n%+v\nfrom:\n%s", got, list, out.String())
				}
			})
		})
	}
}

// TestWriteLayout: the example file, and a rule setting what it does not,
// are written as people write rules, and read back the same.
func TestWriteLayout(t *testing.T) {
	want, err := rules.Load("../docs/examples/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tol := 0.25
	want = append(want, rules.Rule{Name: "odd", Scope: rules.Route, Key: []rules.Attr{rules.AttrTenant, rules.AttrRoute},
		Algorithm: 1, Limit: 7, Period: 90 * time.Minute, Intent: 2, Tolerance: &tol, FailMode: 2,
		Match: rules.Match{Tenants: []string{"acme"}, Plans: []string{"pro"}}, Regions: map[string]float64{"eu": 0.6, "us": 0.4},
		Tenants: map[string]rules.TenantOverride{"acme": {Weight: 2}}})
	for format, write := range writers {
		t.Run(format, func(t *testing.T) {
			var out bytes.Buffer
			if err := write(&out, want); err != nil {
				t.Fatal(err)
			}
			got, err := rules.Parse("out."+format, out.Bytes())
			if err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("read back:\n%+v\nwant:\n%+v\nfrom:\n%s", got, want, out.String())
			}
			if format == "yaml" && (!strings.HasPrefix(out.String(), "rules:\n  - name: ") ||
				!strings.Contains(out.String(), "period: 1h30m\n") || !strings.Contains(out.String(), "free: {weight: 1}") ||
				!strings.Contains(out.String(), "regions: {eu: 0.6, us: 0.4}")) {
				t.Errorf("YAML not as people write it:\n%s", out.String())
			}
		})
	}
}
