package algo

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

// peekMatches checks a peek against the decision the same request was
// then given: the same verdict and wait, and as Remaining what was left
// before the request (what it left, plus its cost when admitted).
func peekMatches(t *rapid.T, what string, i int, cost int64, peek, got Decision) {
	if peek.Allowed != got.Allowed {
		t.Fatalf("%s request %d (cost %d): peek allowed %v, request %v\npeek %+v\ngot  %+v", what, i, cost, peek.Allowed, got.Allowed, peek, got)
	}
	want := got.Remaining
	if got.Allowed {
		want += cost
	} else if peek.RetryAfter != got.RetryAfter {
		t.Fatalf("%s request %d (cost %d): peek retry %v, request %v", what, i, cost, peek.RetryAfter, got.RetryAfter)
	}
	if peek.Remaining != want {
		t.Fatalf("%s request %d (cost %d): peek remaining %d, want %d\npeek %+v\ngot  %+v", what, i, cost, peek.Remaining, want, peek, got)
	}
}

// TestPropertyPeekAnswersAsAllow: for any request sequence and every
// algorithm, PeekAt(now, cost) just before AllowAt(now, cost) answers the
// same verdict and wait, with the remaining before the request; and
// peeks change nothing: a twin that is never peeked decides every
// request alike. For a Limiter and for a key of a Keyed store.
func TestPropertyPeekAnswersAsAllow(t *testing.T) {
	for _, alg := range Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				cfg := genConfig(t, alg)
				l, _ := New(cfg)
				twin, _ := New(cfg)
				k, _ := NewKeyed(cfg, KeyedOptions{})
				ktwin, _ := NewKeyed(cfg, KeyedOptions{})
				for i, r := range genForward(t, cfg) {
					now := at(time.Duration(r.t))
					for range rapid.IntRange(0, 2).Draw(t, "extraPeeks") {
						c := rapid.Int64Range(0, cfg.Limit+cfg.Burst+2).Draw(t, "peekCost")
						l.PeekAt(now, c)
						k.PeekAt("key", now, c)
					}
					if r.cost == 0 {
						if p := l.PeekAt(now, 0); p != l.AllowAt(now, 0) || !p.Allowed {
							t.Fatalf("request %d: PeekAt(0) %+v differs from AllowAt(0)", i, p)
						}
					}
					peek := l.PeekAt(now, r.cost)
					kpeek := k.PeekAt("key", now, r.cost)
					got, kgot := l.AllowAt(now, r.cost), k.AllowAt("key", now, r.cost)
					if r.cost > 0 {
						peekMatches(t, "Limiter", i, r.cost, peek, got)
						peekMatches(t, "Keyed", i, r.cost, kpeek, kgot)
					}
					if tw := twin.AllowAt(now, r.cost); tw != got {
						t.Fatalf("request %d: peeked limiter %+v, twin %+v", i, got, tw)
					}
					if tw := ktwin.AllowAt("key", now, r.cost); tw != kgot {
						t.Fatalf("request %d: peeked key %+v, twin %+v", i, kgot, tw)
					}
				}
			})
		})
	}
}

// TestPeekAtAtTheLimit: a peek of one unit at a subject with nothing left
// is refused with the wait a request would get, where a peek of cost 0
// is allowed; a peek of more than the limit is never admissible.
func TestPeekAtAtTheLimit(t *testing.T) {
	for _, alg := range Algorithms() {
		cfg := Config{Algorithm: alg, Limit: 3, Period: time.Second}
		l := mustNew(t, cfg)
		k := mustKeyed(t, cfg, KeyedOptions{})
		for range 100 {
			if d := l.PeekAt(t0, 1); !d.Allowed || d.Remaining != l.AllowAt(t0, 0).Remaining {
				t.Fatalf("%v: a peek of a fresh limiter: %+v", alg, d)
			}
			k.PeekAt("a", t0, 1)
		}
		if s := k.Stats(); s.Keys != 0 {
			t.Errorf("%v: peeks stored %d keys", alg, s.Keys)
		}
		for range 3 {
			l.AllowAt(t0, 1)
			k.AllowAt("a", t0, 1)
		}
		for _, d := range []Decision{l.PeekAt(t0, 1), k.PeekAt("a", t0, 1)} {
			if d.Allowed || d.Remaining != 0 || d.RetryAfter <= 0 {
				t.Errorf("%v: a peek at the limit: %+v; want refused with a wait", alg, d)
			}
			if want := l.AllowAt(t0, 1).RetryAfter; d.RetryAfter != want {
				t.Errorf("%v: a peek at the limit waits %v, a request %v", alg, d.RetryAfter, want)
			}
		}
		if d := l.PeekAt(t0, 0); !d.Allowed {
			t.Errorf("%v: a peek of cost 0 refused: %+v", alg, d)
		}
		if d := l.PeekAt(t0, 100); d.Allowed || d.RetryAfter != Never {
			t.Errorf("%v: a peek over the limit: %+v; want Never", alg, d)
		}
	}
}

// TestStripedPeekCountsHeldUnits: units the stripes hold are remaining,
// and a peek they could admit is admitted, as the request is.
func TestStripedPeekCountsHeldUnits(t *testing.T) {
	lim := mustNew(t, Config{Algorithm: TokenBucket, Limit: 100, Period: time.Second, Burst: 100})
	s := NewStriped(lim, 4, 8)
	for range 10 {
		s.AllowAt(t0, 1) // takes a chunk into a stripe
	}
	if s.Held() == 0 {
		t.Fatal("no units held in stripes")
	}
	if d, want := s.PeekAt(t0, 1), s.AllowAt(t0, 0).Remaining; !d.Allowed || d.Remaining != want {
		t.Errorf("peek %+v; want allowed with remaining %d", d, want)
	}
	for s.AllowAt(t0, 1).Allowed {
	}
	if d := s.PeekAt(t0, 1); d.Allowed || d.RetryAfter <= 0 {
		t.Errorf("peek of an empty Striped: %+v; want refused with a wait", d)
	}
}

func TestPeekAtAllocatesNothing(t *testing.T) {
	for _, alg := range Algorithms() {
		cfg := Config{Algorithm: alg, Limit: 100, Period: time.Second}
		l := mustNew(t, cfg)
		k := mustKeyed(t, cfg, KeyedOptions{})
		now := t0
		for i := 0; i < 300; i++ {
			now = now.Add(time.Millisecond)
			l.AllowAt(now, 1)
			k.AllowAt("tenant:acme", now, 1)
		}
		if n := testing.AllocsPerRun(1000, func() {
			now = now.Add(time.Millisecond)
			l.PeekAt(now, 1)
			k.PeekAt("tenant:acme", now, 1)
			k.PeekAt("tenant:other", now, 1)
		}); n != 0 {
			t.Errorf("%v PeekAt: %v allocs per call", alg, n)
		}
	}
}
