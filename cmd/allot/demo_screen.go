package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/allot-io/allot/sim"
)

// screen shows the fleet once a second until ctx ends.
func (d *demo) screen(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	prev := d.snapshot()
	lines := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cur := d.snapshot()
		// Not on ctx, which may end as this frame is drawn: the last frame
		// would show no leader. Each status call has its own timeout.
		leader := d.leaderID(context.WithoutCancel(ctx))
		if d.tty {
			text := d.render(prev, cur, leader)
			if lines > 0 {
				fmt.Fprintf(d.out, "\033[%dA\033[J", lines)
			}
			fmt.Fprint(d.out, text)
			lines = strings.Count(text, "\n")
		} else {
			fmt.Fprint(d.out, d.renderLine(prev, cur, leader))
		}
		prev = cur
	}
}

// snap is the counters at one moment.
type snap struct {
	at       time.Time
	admitted [][]int64 // tenant, node
	denied   []int64
}

func (d *demo) snapshot() snap {
	s := snap{at: time.Now()}
	for _, t := range d.tenants {
		row := make([]int64, len(t.perNode))
		for i := range row {
			row[i] = t.perNode[i].Load()
		}
		s.admitted = append(s.admitted, row)
		s.denied = append(s.denied, t.denied.Load())
	}
	return s
}

func (d *demo) render(prev, cur snap, leader string) string {
	var b strings.Builder
	secs := cur.at.Sub(prev.at).Seconds()
	fmt.Fprintf(&b, "t=%4.0fs  leader %-4s  checks: p99 < %v, max %v\n\n", cur.at.Sub(d.start).Seconds(), leader, d.lat.quantile(0.99), d.lat.max().Round(time.Microsecond))
	fmt.Fprintf(&b, "%-7s %24s %24s\n", "gateway", "acme (pro) lease  rate/s", "globex (free) lease  rate/s")
	for i, nd := range d.nodes {
		fmt.Fprintf(&b, "%-7s", nd.id)
		for ti, t := range d.tenants {
			lease := nd.agent.Share("plan-quota", t.name)
			rate := float64(cur.admitted[ti][i]-prev.admitted[ti][i]) / secs
			fmt.Fprintf(&b, " %15.0f %8.0f", lease, rate)
		}
		fmt.Fprintln(&b)
	}
	fmt.Fprintln(&b)
	total := 0.0
	for ti, t := range d.tenants {
		rate := float64(sum(cur.admitted[ti])-sum(prev.admitted[ti])) / secs
		total += rate
		fmt.Fprintf(&b, "%-7s admitted %6.0f/s of plan-quota %5d/s (%5.1f%%)   refused: %s\n", t.name, rate, t.quota, 100*rate/float64(t.quota), refusals(t))
	}
	fmt.Fprintf(&b, "fleet   admitted %6.0f/s of api-capacity %d/s (%5.1f%%)\n\n", total, d.capacity, 100*total/float64(d.capacity))
	d.mu.Lock()
	for _, ev := range d.events {
		fmt.Fprintln(&b, ev)
	}
	d.mu.Unlock()
	return b.String()
}

func (d *demo) renderLine(prev, cur snap, leader string) string {
	secs := cur.at.Sub(prev.at).Seconds()
	var parts []string
	for ti, t := range d.tenants {
		rate := float64(sum(cur.admitted[ti])-sum(prev.admitted[ti])) / secs
		// Each gateway it reaches: admitted/s of its plan-quota lease, so
		// that a failed run's output says which gateway fell short.
		var nodes []string
		for ni, w := range t.weights {
			if w > 0 {
				nodes = append(nodes, fmt.Sprintf("%s %.0f of %.0f", d.nodes[ni].id,
					float64(cur.admitted[ti][ni]-prev.admitted[ti][ni])/secs, d.nodes[ni].agent.Share("plan-quota", t.name)))
			}
		}
		parts = append(parts, fmt.Sprintf("%s %.0f/s of %d (%.1f%%: %s)", t.name, rate, t.quota, 100*rate/float64(t.quota), strings.Join(nodes, ", ")))
	}
	return fmt.Sprintf("[%5.1fs] leader %s; %s; refused %s\n", cur.at.Sub(d.start).Seconds(), leader, strings.Join(parts, ", "), refusals(d.tenants...))
}

func sum(xs []int64) int64 {
	var s int64
	for _, x := range xs {
		s += x
	}
	return s
}

// refusals summarises refusals by rule.
func refusals(ts ...*demoTenant) string {
	counts := map[string]int64{}
	for _, t := range ts {
		t.byRule.Range(func(k, v any) bool {
			counts[k.(string)] += v.(*atomic.Int64).Load()
			return true
		})
	}
	if len(counts) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%d by %s", counts[k], k))
	}
	return strings.Join(parts, ", ")
}

// syncWriter serialises the screen's and the events' writes.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// trailing counts a tenant's admissions over the last second, in the
// traffic's time (demo.send), for several goroutines.
type trailing struct {
	mu sync.Mutex
	t  *sim.Trailing
}

func newTrailing(period time.Duration, n int) *trailing {
	return &trailing{t: sim.NewTrailing(period, n)}
}

func (t *trailing) add(at time.Time) {
	t.mu.Lock()
	t.t.Add(time.Duration(at.UnixNano()))
	t.mu.Unlock()
}

func (t *trailing) count(at time.Time) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.t.Count(time.Duration(at.UnixNano()))
}

// latency is a histogram of check times in power-of-two nanosecond
// buckets, safe for concurrent use.
type latency struct {
	buckets [40]atomic.Int64
	worst   atomic.Int64
}

func (l *latency) observe(d time.Duration) {
	ns := max(int64(d), 1)
	l.buckets[min(63-bits.LeadingZeros64(uint64(ns)), len(l.buckets)-1)].Add(1)
	for {
		w := l.worst.Load()
		if ns <= w || l.worst.CompareAndSwap(w, ns) {
			return
		}
	}
}

func (l *latency) count() int64 {
	var n int64
	for i := range l.buckets {
		n += l.buckets[i].Load()
	}
	return n
}

// quantile is the upper bound of the bucket holding quantile q.
func (l *latency) quantile(q float64) time.Duration {
	total := l.count()
	if total == 0 {
		return 0
	}
	want := int64(math.Ceil(q * float64(total)))
	var seen int64
	for i := range l.buckets {
		seen += l.buckets[i].Load()
		if seen >= want {
			return time.Duration(int64(1) << (i + 1))
		}
	}
	return l.max()
}

func (l *latency) max() time.Duration { return time.Duration(l.worst.Load()) }
