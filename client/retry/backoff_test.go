package retry

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"
)

func TestBackoffCeiling(t *testing.T) {
	const s = time.Second
	tests := []struct {
		base, max time.Duration
		retry     int
		want      time.Duration
	}{
		{s, 30 * s, 1, s},
		{s, 30 * s, 2, 2 * s},
		{s, 30 * s, 5, 16 * s},
		{s, 30 * s, 6, 30 * s},
		{s, 30 * s, 1000, 30 * s},
		{40 * s, 30 * s, 1, 30 * s},
		{time.Hour, time.Duration(math.MaxInt64), 200, time.Duration(math.MaxInt64)},
		{1, time.Duration(math.MaxInt64), 63, 1 << 62},
	}
	for _, tt := range tests {
		if got := backoffCeiling(tt.base, tt.max, tt.retry); got != tt.want {
			t.Errorf("backoffCeiling(%v, %v, %d) = %v, want %v", tt.base, tt.max, tt.retry, got, tt.want)
		}
	}
}

func TestJitterEdges(t *testing.T) {
	const (
		base     = time.Second
		minDelay = 100 * time.Millisecond
		maxDelay = 30 * time.Second
	)
	tests := []struct {
		name  string
		retry int
		r     float64
		want  time.Duration
	}{
		{"draw 0 still waits MinDelay", 1, 0, minDelay},
		{"draw near 1 reaches the ceiling", 3, math.Nextafter(1, 0), 4 * time.Second},
		{"middle", 1, 0.5, minDelay + (base-minDelay)/2},
		{"negative draw clamped", 2, -3, minDelay},
		{"NaN draw clamped", 2, math.NaN(), minDelay},
		{"draw above 1 clamped", 2, 7, 2 * time.Second},
		{"capped", 20, math.Nextafter(1, 0), maxDelay},
	}
	for _, tt := range tests {
		got := jitter(base, minDelay, maxDelay, tt.retry, tt.r)
		if d := got - tt.want; d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("%s: jitter = %v, want %v", tt.name, got, tt.want)
		}
	}
	// A ceiling below MinDelay leaves MinDelay.
	if got := jitter(time.Millisecond, minDelay, maxDelay, 1, 0.9); got != minDelay {
		t.Errorf("jitter under MinDelay = %v, want %v", got, minDelay)
	}
}

func TestDefaultSleep(t *testing.T) {
	if err := sleep(context.Background(), time.Microsecond); err != nil {
		t.Errorf("sleep: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// An hour's sleep on a finished context returns at once with its error.
	if err := sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("sleep on a canceled context: %v", err)
	}
}
