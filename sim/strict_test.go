package sim

import (
	"errors"
	"strings"
	"testing"
)

// TestParseFirstDayMistakes: a scenario file refuses a key given twice
// (the decoder would keep the last) and names a duration written in days
// with what to write instead, not "cannot unmarshal !!str into
// time.Duration".
func TestParseFirstDayMistakes(t *testing.T) {
	base := "nodes: 3\nduration: 10s\ninterval: 1s\nrate: 100\nrule: {algorithm: gcra, limit: 10, period: 1s, intent: capacity}\ntenants: {count: 2}\n"
	tests := []struct{ name, yaml, want string }{
		{"a key twice", base + "nodes: 4\n", `sim: invalid scenario: s.yaml: line 7: nodes is given twice (first on line 1)`},
		{"a nested key twice", strings.Replace(base, "count: 2", "count: 2, count: 3", 1), `sim: invalid scenario: s.yaml: line 6: tenants.count is given twice (first on line 6)`},
		{"a duration in days", strings.Replace(base, "duration: 10s", "duration: 1d", 1), `sim: invalid scenario: s.yaml: line 2: duration: "1d": Go durations have no d; use 24h`},
		{"a period without a unit", strings.Replace(base, "period: 1s", "period: 1", 1), `sim: invalid scenario: s.yaml: line 5: rule.period: "1": a duration needs a unit: 1s, 1m or 1h`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("s.yaml", []byte(tt.yaml))
			if err == nil || err.Error() != tt.want || !errors.Is(err, ErrInvalidScenario) {
				t.Errorf("got %v\nwant %s", err, tt.want)
			}
		})
	}
}
