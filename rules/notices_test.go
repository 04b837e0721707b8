package rules

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// TestNotices: notice thresholds parse, round-trip through the rules file
// form, and are refused, with the field named, when out of order, not
// fractions of the limit in (0, 1], or on a rule that does not measure
// one tenant's usage.
func TestNotices(t *testing.T) {
	const head = "rules:\n- name: q\n  algorithm: fixed_window\n  limit: 100\n  period: 24h\n  intent: quota\n"
	for _, tc := range []struct {
		name, rule string
		want       string // "" when valid
	}{
		{"valid", "  scope: tenant\n  notices: [0.5, 0.8, 1.0]\n", ""},
		{"key tenant", "  scope: user\n  key: [tenant]\n  notices: [1]\n", ""},
		{"out of order", "  scope: tenant\n  notices: [0.8, 0.5]\n", "notices[1]: 0.5 is not above 0.8"},
		{"repeated", "  scope: tenant\n  notices: [0.8, 0.8]\n", "notices[1]: 0.8 is not above 0.8"},
		{"above the limit", "  scope: tenant\n  notices: [0.8, 1.2]\n", "notices[1]: must be a fraction of the limit in (0, 1]"},
		{"zero", "  scope: tenant\n  notices: [0]\n", "notices[0]: must be a fraction"},
		{"negative", "  scope: tenant\n  notices: [-0.5]\n", "notices[0]: must be a fraction"},
		{"nan", "  scope: tenant\n  notices: [.nan]\n", "notices[0]: must be a fraction"},
		{"global", "  scope: global\n  notices: [0.8]\n", "only a rule keyed by tenant alone"},
		{"user", "  scope: user\n  notices: [0.8]\n", "only a rule keyed by tenant alone"},
		{"ip", "  scope: ip\n  notices: [0.8]\n", "only a rule keyed by tenant alone"},
		{"local", "  scope: tenant\n  local: true\n  notices: [0.8]\n", "a local rule is enforced by each node alone"},
		{"shadow", "  scope: tenant\n  shadow: true\n  notices: [0.8]\n", "a shadow rule enforces nothing"},
		{"too many", "  scope: tenant\n  notices: [" + strings.Repeat("0.01, ", MaxNotices) + "1]\n", "lists 17 thresholds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := Parse("rules.yaml", []byte(head+tc.rule))
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				var buf bytes.Buffer
				if err := WriteYAML(&buf, rs); err != nil {
					t.Fatal(err)
				}
				back, err := Parse("again.yaml", buf.Bytes())
				if err != nil || len(back) != 1 || !Equal(&back[0], &rs[0]) || len(back[0].Notices) == 0 {
					t.Fatalf("round trip: %v, %+v from\n%s", err, back, buf.String())
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want a rules.ErrInvalid saying %q", err, tc.want)
			}
		})
	}
}
