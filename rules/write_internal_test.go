package rules

import (
	"testing"
	"time"
)

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Second: "1s", time.Minute: "1m", time.Hour: "1h", 90 * time.Minute: "1h30m",
		61 * time.Second: "1m1s", 500 * time.Millisecond: "500ms", 3601 * time.Second: "1h0m1s", 1500 * time.Millisecond: "1.5s",
	} {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%v) = %q, want %q", d, got, want)
		} else if back, err := time.ParseDuration(got); err != nil || back != d {
			t.Errorf("%q reads back as %v, %v", got, back, err)
		}
	}
}
