package algo

import (
	"testing"
	"time"
)

// TestChargeGoesIntoDebt: a request admitted at its estimate and charged
// more afterwards leaves its limiter owing the difference: refusals until
// time repays it (rates), or until the admission's window stops counting
// (windows); a few periods on, it is admitted again.
func TestChargeGoesIntoDebt(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0) // on a minute boundary
	for _, tc := range []struct{ alg Algorithm }{{GCRA}, {TokenBucket}, {FixedWindow}, {SlidingWindow}, {SlidingLog}} {
		t.Run(tc.alg.String(), func(t *testing.T) {
			cfg := Config{Algorithm: tc.alg, Limit: 10, Period: time.Minute}
			if tc.alg == GCRA || tc.alg == TokenBucket {
				cfg.Burst = 10
			}
			l, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if d := l.AllowAt(t0, 10); !d.Allowed {
				t.Fatalf("the estimate refused: %+v", d)
			}
			l.ChargeAt(t0.Add(time.Second), t0, 5)
			if d := l.AllowAt(t0.Add(2*time.Second), 1); d.Allowed {
				t.Fatalf("admitted with a debt of 5: %+v", d)
			}
			if d := l.AllowAt(t0.Add(3*time.Minute), 1); !d.Allowed {
				t.Fatalf("still refused long after the debt was repaid: %+v", d)
			}
		})
	}
}

// TestChargeSkipsAnEndedWindow: a window algorithm charges nothing once
// the admission's window is over, and a rate algorithm charges at now.
func TestChargeSkipsAnEndedWindow(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow} {
		l, err := New(Config{Algorithm: alg, Limit: 10, Period: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		l.AllowAt(t0, 3)
		l.ChargeAt(t0.Add(3*time.Minute), t0, 100) // long over
		if d := l.AllowAt(t0.Add(3*time.Minute), 10); !d.Allowed {
			t.Errorf("%v: a charge for an ended window was counted: %+v", alg, d)
		}
	}
}

// TestKeyedChargeMatchesLimiter: a store's key is charged as a Limiter is.
func TestKeyedChargeMatchesLimiter(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	for _, alg := range []Algorithm{GCRA, TokenBucket, FixedWindow, SlidingWindow, SlidingLog} {
		cfg := Config{Algorithm: alg, Limit: 10, Period: time.Minute}
		if alg == GCRA || alg == TokenBucket {
			cfg.Burst = 10
		}
		l, _ := New(cfg)
		k, err := NewKeyed(cfg, KeyedOptions{})
		if err != nil {
			t.Fatal(err)
		}
		h := k.Hasher().String("acme")
		for _, step := range []struct {
			at   time.Duration
			cost int64
		}{{0, 4}, {time.Second, 4}} {
			l.AllowAt(t0.Add(step.at), step.cost)
			k.AllowHashAt(h, t0.Add(step.at), step.cost)
		}
		l.ChargeAt(t0.Add(5*time.Second), t0, 6)
		k.ChargeHashAt(h, t0.Add(5*time.Second), t0, 6)
		for s := time.Duration(0); s < 3*time.Minute; s += 7 * time.Second {
			at := t0.Add(6*time.Second + s)
			if a, b := l.PeekAt(at, 1), k.PeekHashAt(h, at, 1); a.Allowed != b.Allowed || a.Remaining != b.Remaining {
				t.Fatalf("%v at +%v: limiter %+v, store %+v", alg, at.Sub(t0), a, b)
			}
		}
	}
}
