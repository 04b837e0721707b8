package duration

import (
	"errors"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		err  string // the whole message, "" when s parses
	}{
		{in: "1m", want: time.Minute},
		{in: "24h", want: 24 * time.Hour},
		{in: "0", want: 0},
		{in: "1d", err: `"1d": Go durations have no d; use 24h`},
		{in: "7d", err: `"7d": Go durations have no d; use 168h`},
		{in: "1.5d", err: `"1.5d": Go durations have no d; use 36h`},
		{in: "2d12h", err: `"2d12h": Go durations have no d; use 60h`},
		{in: "1w", err: `"1w": Go durations have no w; use 168h`},
		{in: "60", err: `"60": a duration needs a unit: 60s, 60m or 60h`},
		{in: "1min", err: `"1min": not a duration: write a number and a unit (ns, us, ms, s, m or h), such as 500ms, 90s, 1m or 24h`},
		{in: "", err: `"": not a duration: write a number and a unit (ns, us, ms, s, m or h), such as 500ms, 90s, 1m or 24h`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := Parse(tt.in)
			if tt.err == "" {
				if err != nil || got != tt.want {
					t.Fatalf("Parse(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
				}
				return
			}
			if err == nil || err.Error() != tt.err || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse(%q) error %v; want %q wrapping ErrInvalid", tt.in, err, tt.err)
			}
		})
	}
}

func TestFormat(t *testing.T) {
	for d, want := range map[time.Duration]string{time.Minute: "1m", 90 * time.Minute: "1h30m", 24 * time.Hour: "24h", 500 * time.Millisecond: "500ms", 90 * time.Second: "1m30s"} {
		if got := Format(d); got != want {
			t.Errorf("Format(%v) = %q, want %q", d, got, want)
		}
	}
}
