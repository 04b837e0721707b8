package algo

import (
	"fmt"
	"math/big"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// genConfig draws a valid Config for alg with small numbers, so that random
// request sequences reach the limit often.
func genConfig(t *rapid.T, alg Algorithm) Config {
	cfg := Config{
		Algorithm: alg,
		Limit:     rapid.Int64Range(1, 40).Draw(t, "limit"),
		Period:    time.Duration(rapid.Int64Range(1, 5000).Draw(t, "periodMs")) * time.Millisecond,
	}
	if alg == TokenBucket || alg == GCRA {
		cfg.Burst = rapid.Int64Range(0, 20).Draw(t, "burst")
	}
	if alg == SlidingWindow && rapid.Bool().Draw(t, "slack") {
		cfg.Slack = rapid.Int64Range(1, cfg.Limit).Draw(t, "slackUnits")
	}
	return cfg
}

// request is one step of a generated sequence.
type request struct {
	t    int64 // ns since t0
	cost int64
}

// genForward draws a sequence of requests with non-decreasing times; gaps are
// a mix of zero, fractions of the period and whole periods, so that both
// bursts and boundaries are exercised.
func genForward(t *rapid.T, cfg Config) []request {
	n := rapid.IntRange(1, 300).Draw(t, "n")
	reqs := make([]request, n)
	now := int64(0)
	maxCost := cfg.Limit + cfg.Burst + 2
	for i := range reqs {
		switch rapid.IntRange(0, 4).Draw(t, "gapKind") {
		case 0: // same instant
		case 1:
			now += rapid.Int64Range(1, int64(cfg.Period)/4+1).Draw(t, "smallGap")
		case 2:
			now += rapid.Int64Range(1, int64(cfg.Period)).Draw(t, "gap")
		case 3:
			now += rapid.Int64Range(0, 3*int64(cfg.Period)).Draw(t, "bigGap")
		case 4: // land exactly on an emission interval or window boundary
			unit := int64(cfg.Period) / cfg.Limit
			if rapid.Bool().Draw(t, "window") {
				unit = int64(cfg.Period)
			}
			now += unit * rapid.Int64Range(1, 3).Draw(t, "units")
		}
		reqs[i] = request{t: now, cost: rapid.Int64Range(0, maxCost).Draw(t, "cost")}
	}
	return reqs
}

// admissions runs reqs through a Limiter and returns the admitted ones.
func admissions(t *rapid.T, cfg Config, reqs []request) []request {
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out []request
	for _, r := range reqs {
		if d := l.AllowAt(at(time.Duration(r.t)), r.cost); d.Allowed && r.cost > 0 {
			out = append(out, r)
		}
	}
	return out
}

// TestPropertyRateBound: for any request sequence, the cost admitted in any
// interval [a, b] never exceeds what the algorithm's definition allows.
//
//	GCRA          ⌊(b − a + τ + T) / T⌋
//	TokenBucket   capacity + ⌊(b − a) / T⌋
func TestPropertyRateBound(t *testing.T) {
	for _, alg := range []Algorithm{GCRA, TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				cfg := genConfig(t, alg)
				p, _ := compile(cfg)
				adm := admissions(t, cfg, genForward(t, cfg))
				for i := range adm {
					sum := int64(0)
					for j := i; j < len(adm); j++ {
						sum += adm[j].cost
						span := adm[j].t - adm[i].t
						bound := p.maxCost + span/p.emission
						if alg == GCRA {
							bound = (span + p.tau + p.emission) / p.emission
						}
						if sum > bound {
							t.Fatalf("admitted %d in [%d, %d] ns, bound %d", sum, adm[i].t, adm[j].t, bound)
						}
					}
				}
			})
		})
	}
}

// TestPropertyWindowBound: the window algorithms never admit more than Limit
// in one epoch-aligned window; the sliding log never admits more than Limit
// in any trailing window (t − Period, t]; and the sliding window counter
// never admits more than twice Limit in any span shorter than Period.
func TestPropertyWindowBound(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow, SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				cfg := genConfig(t, alg)
				p, _ := compile(cfg)
				adm := admissions(t, cfg, genForward(t, cfg))
				perWindow := map[int64]int64{}
				for _, r := range adm {
					w := p.windowStart(at(time.Duration(r.t)).UnixNano())
					perWindow[w] += r.cost
					if perWindow[w] > cfg.Limit {
						t.Fatalf("window %d admitted %d > limit %d", w, perWindow[w], cfg.Limit)
					}
				}
				for i := range adm {
					sum := int64(0)
					for j := i; j < len(adm) && adm[j].t-adm[i].t < p.period; j++ {
						sum += adm[j].cost
					}
					bound := 2 * cfg.Limit
					if alg == SlidingLog {
						bound = cfg.Limit
					}
					if sum > bound {
						t.Fatalf("admitted %d within one period from %d ns, bound %d", sum, adm[i].t, bound)
					}
				}
			})
		})
	}
}

// model is a reference implementation written from each algorithm's
// textbook definition in exact rational arithmetic, independent of the
// integer formulations used by the package.
type model struct {
	cfg     Config
	p       params
	log     []request       // sliding log: admissions
	windows map[int64]int64 // fixed and sliding window: cost per window index
	level   *big.Rat        // GCRA as a continuous-state leaky bucket: content in ns
	tokens  *big.Rat        // token bucket: tokens
	last    int64           // GCRA and token bucket: last update
	started bool
}

func newModel(cfg Config) *model {
	p, _ := compile(cfg)
	return &model{cfg: cfg, p: p, windows: map[int64]int64{}, level: new(big.Rat), tokens: big.NewRat(p.maxCost, 1)}
}

func rat(n int64) *big.Rat { return new(big.Rat).SetInt64(n) }

func (m *model) allow(now, cost int64) bool {
	P := int64(m.cfg.Period)
	switch m.cfg.Algorithm {
	case SlidingLog:
		sum := int64(0)
		for _, r := range m.log {
			if r.t > now-P {
				sum += r.cost
			}
		}
		if sum+cost > m.cfg.Limit {
			return false
		}
		m.log = append(m.log, request{now, cost})
		return true
	case FixedWindow:
		w := floorDiv(now, P)
		if m.windows[w]+cost > m.cfg.Limit {
			return false
		}
		m.windows[w] += cost
		return true
	case SlidingWindow:
		w := floorDiv(now, P)
		elapsed := now - w*P
		est := new(big.Rat).Mul(rat(m.windows[w-1]), big.NewRat(P-elapsed, P))
		est.Add(est, rat(m.windows[w]+cost))
		if est.Cmp(rat(m.cfg.Limit+m.cfg.Slack)) > 0 || m.windows[w]+cost > m.cfg.Limit {
			return false
		}
		m.windows[w] += cost
		return true
	case GCRA:
		// Continuous-state leaky bucket: the bucket drains one ns per ns;
		// each unit adds T; a request fits if the content stays within τ+T.
		if m.started {
			m.level.Sub(m.level, rat(now-m.last))
			if m.level.Sign() < 0 {
				m.level.SetInt64(0)
			}
		}
		m.started, m.last = true, now
		next := new(big.Rat).Add(m.level, rat(cost*m.p.emission))
		if next.Cmp(rat(m.p.tau+m.p.emission)) > 0 {
			return false
		}
		m.level = next
		return true
	default: // TokenBucket: tokens = min(C, tokens + elapsed/T)
		if m.started {
			m.tokens.Add(m.tokens, big.NewRat(now-m.last, m.p.emission))
			if m.tokens.Cmp(rat(m.p.maxCost)) > 0 {
				m.tokens.SetInt64(m.p.maxCost)
			}
		}
		m.started, m.last = true, now
		if m.tokens.Cmp(rat(cost)) < 0 {
			return false
		}
		m.tokens.Sub(m.tokens, rat(cost))
		return true
	}
}

// TestPropertyMatchesModel: every algorithm decides exactly as its textbook
// definition does, step by step, for any forward-moving sequence.
func TestPropertyMatchesModel(t *testing.T) {
	for _, alg := range Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				cfg := genConfig(t, alg)
				l, _ := New(cfg)
				m := newModel(cfg)
				for i, r := range genForward(t, cfg) {
					now := at(time.Duration(r.t)).UnixNano()
					d := l.AllowAt(at(time.Duration(r.t)), r.cost)
					if want := m.allow(now, r.cost); d.Allowed != want {
						t.Fatalf("step %d (t=%d ns, cost %d): Allowed = %v, model says %v", i, r.t, r.cost, d.Allowed, want)
					}
				}
			})
		})
	}
}

// TestPropertyRetryAfter: a refused request becomes admissible exactly at
// RetryAfter and not a nanosecond before, and Never means never.
func TestPropertyRetryAfter(t *testing.T) {
	for _, alg := range Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				cfg := genConfig(t, alg)
				reqs := genForward(t, cfg)
				// Replay the prefix on fresh limiters, then probe the last
				// request at now+RetryAfter−1 and now+RetryAfter.
				replay := func() *Limiter {
					l, _ := New(cfg)
					for _, r := range reqs[:len(reqs)-1] {
						l.AllowAt(at(time.Duration(r.t)), r.cost)
					}
					return l
				}
				last := reqs[len(reqs)-1]
				if last.cost == 0 {
					return
				}
				now := at(time.Duration(last.t))
				d := replay().AllowAt(now, last.cost)
				switch {
				case d.Allowed:
					if d.RetryAfter != 0 {
						t.Fatalf("admitted with RetryAfter %v", d.RetryAfter)
					}
				case d.RetryAfter < 0:
					if p, _ := compile(cfg); last.cost <= p.maxCost {
						t.Fatalf("Never for cost %d ≤ max %d", last.cost, p.maxCost)
					}
				default:
					if d.RetryAfter > 0 {
						if early := replay().AllowAt(now.Add(d.RetryAfter-1), last.cost); early.Allowed {
							t.Fatalf("admitted 1ns before RetryAfter %v", d.RetryAfter)
						}
					}
					if ok := replay().AllowAt(now.Add(d.RetryAfter), last.cost); !ok.Allowed {
						t.Fatalf("refused at RetryAfter %v: %+v", d.RetryAfter, ok)
					}
				}
			})
		})
	}
}

// TestPropertyTimeBackwards: a request at an instant earlier than the latest
// one seen never leaves more capacity at that latest instant than there was
// before it.
func TestPropertyTimeBackwards(t *testing.T) {
	for _, alg := range Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				cfg := genConfig(t, alg)
				reqs := genForward(t, cfg)
				latest := at(time.Duration(reqs[len(reqs)-1].t))
				back := latest.Add(-time.Duration(rapid.Int64Range(1, 3*int64(cfg.Period)).Draw(t, "back")))
				cost := rapid.Int64Range(1, cfg.Limit+cfg.Burst).Draw(t, "backCost")
				a, _ := New(cfg)
				b, _ := New(cfg)
				for _, r := range reqs {
					a.AllowAt(at(time.Duration(r.t)), r.cost)
					b.AllowAt(at(time.Duration(r.t)), r.cost)
				}
				before := b.AllowAt(latest, 0)
				a.AllowAt(back, cost)
				after := a.AllowAt(latest, 0)
				if after.Remaining > before.Remaining {
					t.Fatalf("a request %v in the past raised Remaining at the latest instant from %d to %d", latest.Sub(back), before.Remaining, after.Remaining)
				}
			})
		})
	}
}

// TestPropertyKeyedMatchesLimiters: a Keyed store decides every key exactly as
// a separate Limiter per key would, even with keys expiring the moment they
// are at rest and background sweeps interleaved: expiry never hands out a
// reset.
func TestPropertyKeyedMatchesLimiters(t *testing.T) {
	for _, alg := range Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				cfg := genConfig(t, alg)
				k, err := NewKeyed(cfg, KeyedOptions{MaxKeys: 1000, Shards: rapid.SampledFrom([]int{1, 4}).Draw(t, "shards")})
				if err != nil {
					t.Fatal(err)
				}
				limiters := map[string]*Limiter{}
				for i, r := range genForward(t, cfg) {
					key := fmt.Sprintf("k%d", rapid.IntRange(0, 5).Draw(t, "key"))
					if limiters[key] == nil {
						limiters[key], _ = New(cfg)
					}
					now := at(time.Duration(r.t))
					if rapid.IntRange(0, 9).Draw(t, "sweep") == 0 {
						k.Sweep(now)
					}
					got := k.AllowAt(key, now, r.cost)
					want := limiters[key].AllowAt(now, r.cost)
					if got != want {
						t.Fatalf("step %d key %s: keyed %+v, limiter %+v", i, key, got, want)
					}
				}
			})
		})
	}
}
