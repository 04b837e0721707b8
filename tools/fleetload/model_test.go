package main

import (
	"io"
	"math"
	"testing"
	"time"
)

// TestModel works out the traffic of a few shapes and checks what the
// harness relies on: every gateway offers its rate, the tenants' rates
// add up to the fleet's, the heaviest tenant of each plan (and no other)
// offers more than its quota, and every other key offers at most
// 1/headroom of its limit.
func TestModel(t *testing.T) {
	for _, sh := range []struct{ n, t int }{{100, 2000}, {20, 500}, {10, 200}, {200, 10000}, {3, 5}} {
		base := defaultConfig().shape
		base.gateways, base.tenants = sh.n, sh.t
		m, err := newModel(base)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range m.describe() {
			t.Logf("N=%d T=%d: %s", sh.n, sh.t, s)
		}
		sum := 0.0
		for g, mx := range m.mixes {
			if last := mx.cum[len(mx.cum)-1]; last != 1 || len(mx.cum) != len(mx.tenants) {
				t.Errorf("N=%d T=%d: gateway %d's mix ends at %v", sh.n, sh.t, g, last)
			}
		}
		binding, used := 0, map[string]bool{}
		for i := range m.tenants {
			tn := &m.tenants[i]
			sum += tn.rate
			used[tn.plan] = true
			if tn.gateways < 1 {
				t.Errorf("tenant %s on no gateway", tn.name)
			}
			quota, _ := m.limitOf(ruleTenant, i)
			over := tn.rate*60 > quota
			if over != tn.binds {
				t.Errorf("N=%d T=%d: %s offers %.0f/min against a quota of %.0f; binds %v", sh.n, sh.t, tn.name, tn.rate*60, quota, tn.binds)
			}
			if tn.binds {
				binding++
				continue
			}
			if tn.rate*60 > quota/m.headroom*1.0001 {
				t.Errorf("%s offers %.0f/min, more than 1/%v of its quota %.0f", tn.name, tn.rate*60, m.headroom, quota)
			}
			user, _ := m.limitOf(ruleUser, i)
			if top := tn.rate * topShare(m.userCum, tn.users); top > user/m.headroom*1.0001 {
				t.Errorf("%s's busiest user offers %.1f/s against %v/s", tn.name, top, user)
			}
		}
		if want := float64(sh.n) * base.rate; math.Abs(sum-want) > 1e-6*want {
			t.Errorf("N=%d T=%d: tenants offer %.0f/s, want %.0f", sh.n, sh.t, sum, want)
		}
		if binding != len(used) {
			t.Errorf("N=%d T=%d: %d binding tenants, want one per plan with tenants (%d)", sh.n, sh.t, binding, len(used))
		}
	}
}

// TestLedgerJudges: refusals of keys that reached their limit are
// warranted; refusals of keys well under it are not; a window is judged
// only once it is over.
func TestLedgerJudges(t *testing.T) {
	base := defaultConfig().shape
	base.gateways, base.tenants = 2, 10
	m, err := newModel(base)
	if err != nil {
		t.Fatal(err)
	}
	l := newLedger(m)
	l.measuring.Store(true)
	at := time.Unix(1_800_000_000/60*60, 0) // a window's start
	quota, _ := m.limitOf(ruleTenant, 0)
	for range int(quota) {
		l.record(0, 0, 0, -1, at) // tenant 0 spends its quota…
	}
	l.record(0, 0, 0, ruleTenant, at) // …and is refused: warranted
	l.record(1, 0, 0, ruleTenant, at) // tenant 1 is refused at once: not
	l.record(2, 0, 0, ruleUser, at)   // so is a user of tenant 2
	if v := l.judgeWindows(at.Add(30*time.Second), 2*time.Second, false); v.warranted[ruleTenant]+v.unwarranted[ruleTenant] != 0 {
		t.Fatalf("a window judged before its end: %+v", v)
	}
	v := l.judgeWindows(at.Add(62*time.Second), 2*time.Second, false)
	v.add(l.judgeRates(10 * time.Second))
	if v.warranted[ruleTenant] != 1 || v.unwarranted[ruleTenant] != 1 || v.unwarrantedKeys[ruleTenant] != 1 || v.unwarranted[ruleUser] != 1 {
		t.Errorf("verdict %+v", v)
	}
	if v := l.judgeWindows(at.Add(200*time.Second), 0, true); v.unwarranted[ruleTenant] != 0 {
		t.Errorf("a window judged twice: %+v", v)
	}
}

func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"-gateways", "20", "-tenants", "500", "-duration", "60s", "-sweep-gateways", "20, 50"}, io.Discard, defaultConfig())
	if err != nil || cfg.gateways != 20 || cfg.tenants != 500 || len(cfg.sweepN) != 2 || cfg.sweepN[1] != 50 {
		t.Fatalf("parseFlags: %+v, %v", cfg, err)
	}
	if pts := (config{point: cfg.point, sweep: true, sweepN: []int{20, 50}, sweepT: []int{500, 2000, 10000}}).points(); len(pts) != 6 || pts[5].tenants != 10000 {
		t.Errorf("sweep points %+v", pts)
	}
	for _, bad := range [][]string{{"-gateways", "0"}, {"-duration", "10s"}, {"-overload", "0.5"}, {"-sweep-tenants", "x"}, {"-headroom", "1"}} {
		if _, err := parseFlags(bad, io.Discard, defaultConfig()); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
