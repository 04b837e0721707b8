package algo

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestConfigValidation(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		field string // "" means valid
	}{
		{"gcra", Config{Algorithm: GCRA, Limit: 100, Period: time.Second, Burst: 50}, ""},
		{"token bucket default burst", Config{Algorithm: TokenBucket, Limit: 100, Period: time.Second}, ""},
		{"fixed window", Config{Algorithm: FixedWindow, Limit: 1000, Period: time.Minute}, ""},
		{"sliding window", Config{Algorithm: SlidingWindow, Limit: 1000, Period: time.Minute}, ""},
		{"sliding log", Config{Algorithm: SlidingLog, Limit: 5000, Period: time.Hour}, ""},
		{"no algorithm", Config{Limit: 1, Period: time.Second}, "Algorithm"},
		{"unknown algorithm", Config{Algorithm: 99, Limit: 1, Period: time.Second}, "Algorithm"},
		{"zero limit", Config{Algorithm: GCRA, Period: time.Second}, "Limit"},
		{"negative limit", Config{Algorithm: FixedWindow, Limit: -5, Period: time.Second}, "Limit"},
		{"zero period", Config{Algorithm: GCRA, Limit: 1}, "Period"},
		{"negative period", Config{Algorithm: TokenBucket, Limit: 1, Period: -time.Second}, "Period"},
		{"period over a century", Config{Algorithm: FixedWindow, Limit: 1, Period: 101 * 365 * 24 * time.Hour}, "Period"},
		{"negative burst", Config{Algorithm: TokenBucket, Limit: 1, Period: time.Second, Burst: -1}, "Burst"},
		{"burst on a window", Config{Algorithm: FixedWindow, Limit: 1, Period: time.Second, Burst: 3}, "Burst"},
		{"negative slack", Config{Algorithm: SlidingWindow, Limit: 10, Period: time.Second, Slack: -1}, "Slack"},
		{"slack on a fixed window", Config{Algorithm: FixedWindow, Limit: 10, Period: time.Second, Slack: 1}, "Slack"},
		{"slack over the limit", Config{Algorithm: SlidingWindow, Limit: 10, Period: time.Second, Slack: 11}, "Slack"},
		{"rate finer than a nanosecond", Config{Algorithm: GCRA, Limit: 2_000_000_000, Period: time.Second}, "Limit"},
		{"sliding window limit too large", Config{Algorithm: SlidingWindow, Limit: 1 << 33, Period: time.Second}, "Limit"},
		{"sliding log limit too large", Config{Algorithm: SlidingLog, Limit: 1 << 30, Period: time.Hour}, "Limit"},
		{"burst too slow to drain", Config{Algorithm: GCRA, Limit: 1, Period: 24 * time.Hour, Burst: 1 << 40}, "Burst"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			_, newErr := New(tt.cfg)
			_, keyedErr := NewKeyed(tt.cfg, KeyedOptions{})
			if tt.field == "" {
				if err != nil || newErr != nil || keyedErr != nil {
					t.Fatalf("valid config rejected: %v / %v / %v", err, newErr, keyedErr)
				}
				return
			}
			for _, e := range []error{err, newErr, keyedErr} {
				var ce *ConfigError
				if !errors.As(e, &ce) {
					t.Fatalf("error %v is not a *ConfigError", e)
				}
				if ce.Field != tt.field {
					t.Errorf("error names field %q, want %q (%v)", ce.Field, tt.field, e)
				}
				if !errors.Is(e, ErrInvalidConfig) {
					t.Errorf("errors.Is(%v, ErrInvalidConfig) = false", e)
				}
				if !strings.HasPrefix(e.Error(), "algo: ") {
					t.Errorf("error %q lacks the package prefix", e)
				}
			}
		})
	}
}

func TestKeyedOptionsValidation(t *testing.T) {
	cfg := Config{Algorithm: GCRA, Limit: 10, Period: time.Second}
	for _, tt := range []struct {
		opts  KeyedOptions
		field string
	}{
		{KeyedOptions{MaxKeys: -1}, "MaxKeys"},
		{KeyedOptions{IdleTTL: -time.Second}, "IdleTTL"},
		{KeyedOptions{Overflow: 7}, "Overflow"},
		{KeyedOptions{Shards: -2}, "Shards"},
		{KeyedOptions{Shards: 4096}, "Shards"},
	} {
		_, err := NewKeyed(cfg, tt.opts)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != tt.field {
			t.Errorf("NewKeyed(%+v) = %v, want an error naming %s", tt.opts, err, tt.field)
		}
	}
	k, err := NewKeyed(cfg, KeyedOptions{Shards: 3})
	if err != nil {
		t.Fatal(err)
	}
	if got := k.Options(); got.Shards != 4 || got.MaxKeys != DefaultMaxKeys {
		t.Errorf("defaults: got %+v, want 4 shards (rounded up) and DefaultMaxKeys", got)
	}
}

func TestAlgorithmNames(t *testing.T) {
	for _, a := range Algorithms() {
		b, err := a.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back Algorithm
		if err := back.UnmarshalText(b); err != nil || back != a {
			t.Errorf("round trip of %v: got %v, %v", a, back, err)
		}
		if a.String() != string(b) {
			t.Errorf("String() = %q, MarshalText = %q", a.String(), b)
		}
	}
	want := map[string]Algorithm{"fixed_window": FixedWindow, "sliding_log": SlidingLog, "sliding_window": SlidingWindow, "token_bucket": TokenBucket, "gcra": GCRA}
	for name, a := range want {
		if got, err := ParseAlgorithm(name); err != nil || got != a {
			t.Errorf("ParseAlgorithm(%q) = %v, %v", name, got, err)
		}
	}
	if _, err := ParseAlgorithm("leaky_bucket"); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("unknown name: got %v", err)
	}
	if _, err := Algorithm(0).MarshalText(); err == nil {
		t.Error("zero algorithm marshalled without error")
	}
}

func TestConfigRoundTrip(t *testing.T) {
	cfg := Config{Algorithm: GCRA, Limit: 100, Period: time.Second, Burst: 50}
	if got := mustNew(t, cfg).Config(); got != cfg {
		t.Errorf("Config() = %+v, want %+v", got, cfg)
	}
}
