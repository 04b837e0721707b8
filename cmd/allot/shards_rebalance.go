package main

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/allot-io/allot/internal/shard"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/grpc"
)

const shardsRebalanceAbout = `
Measures the load of every shard group (the key entries, demand and usage
counts, its leader takes per slot) over --sample, and proposes slot moves
that bring every group within --tolerance of the mean: runs of one group's
contiguous slots, never a pinned one, from the most loaded group to the
least, none moving more than the gap between them, so that no move makes
the balance worse. It prints the proposals and the loads they lead to,
and why it proposes no more: every group within --tolerance, no load
measured, --max-moves spent, the load all in pinned slots, or no move that
evens it out (each slot with load heavier than the gap); --apply then
carries them out one at a time, each as 'allot shards move --wait' would.`

func shardsRebalanceFlags(f *flags) runFunc {
	cmd := f.cmd
	cf := f.client()
	var sample time.Duration
	var tolerance float64
	var maxMoves int
	var apply bool
	f.DurationVar(&sample, "sample", 10*time.Second, "how long to measure each group's load")
	f.Float64Var(&tolerance, "tolerance", 0.1, "how far above the mean a group may stay, as a fraction")
	f.IntVar(&maxMoves, "max-moves", 8, "at most this many moves")
	f.BoolVar(&apply, "apply", false, "carry the proposed moves out")
	return func(ctx context.Context, e *env, args []string) error {
		if sample < time.Second || tolerance < 0 || maxMoves < 1 {
			return usagef(cmd, "--sample at least 1s, --tolerance at least 0, --max-moves at least 1")
		}
		cl, err := cf.connect()
		if err != nil {
			return err
		}
		defer cl.Close()
		m, _, err := readShardMap(ctx, cf, cl)
		if err != nil {
			return err
		}
		if len(m.Groups) < 2 {
			return &refusedError{err: fmt.Errorf("the region is one group: add one first (allot shards add-group)")}
		}
		fmt.Fprintf(e.stdout, "measuring each group's load for %v…\n", sample)
		load, err := measureLoad(ctx, cf, m, sample)
		if err != nil {
			return err
		}
		groups, before := shard.GroupLoads(m, load)
		plan := shard.Rebalance(m, load, tolerance, maxMoves)
		after := m.Clone()
		for _, p := range plan.Proposals {
			if err := after.Assign(p.First, p.Last, p.To); err != nil {
				return err
			}
		}
		_, then := shard.GroupLoads(after, load)
		for i, g := range groups {
			fmt.Fprintf(e.stdout, "  %-12s %10s key entries/s now, %10s after\n", g, perSec(before[i]), perSec(then[i]))
		}
		for _, p := range plan.Proposals {
			fmt.Fprintf(e.stdout, "move %d-%d from %s to %s (%s key entries/s)\n", p.First, p.Last, p.From, p.To, perSec(p.Load))
		}
		fmt.Fprintln(e.stdout, rebalanceStop(plan, groups, then, tolerance, sample, maxMoves))
		if len(plan.Proposals) == 0 {
			return nil
		}
		if !apply {
			fmt.Fprintln(e.stdout, "run again with --apply to carry these out")
			return nil
		}
		move := shardsCommand().lookup("move")
		for _, p := range plan.Proposals {
			sub := *e
			sub.args = []string{fmt.Sprintf("%d-%d", p.First, p.Last), "--to", p.To, "--wait", "--coordinator", cf.coordinators, "--timeout", cf.timeout.String()}
			if err := move.dispatch(ctx, &sub, "shards move"); err != nil {
				return fmt.Errorf("move %d-%d to %s: %w", p.First, p.Last, p.To, err)
			}
		}
		return nil
	}
}

// rebalanceStop says why a rebalance proposes what it does and no more:
// the groups are balanced, nothing was measured, no move evens the load
// out, it is all pinned, or --max-moves is spent. loads are the groups'
// after the proposals.
func rebalanceStop(plan shard.Plan, groups []string, loads []float64, tolerance float64, sample time.Duration, maxMoves int) string {
	var hi float64
	for i, g := range groups {
		if g == plan.Hi {
			hi = loads[i]
		}
	}
	nothing, then := ": nothing to move", ""
	if len(plan.Proposals) > 0 {
		nothing, then = "", "after these, "
	}
	above := fmt.Sprintf("%s%s carries %s key entries/s, %.0f%% above the mean of %s (--tolerance %.0f%%)",
		then, plan.Hi, perSec(hi), (hi/plan.Mean-1)*100, perSec(plan.Mean), tolerance*100)
	switch plan.Stop {
	case shard.NoLoad:
		return fmt.Sprintf("no group's leader counted a key entry in %v: no agent reported to any group, so there is no load to balance", sample)
	case shard.NoFit:
		return fmt.Sprintf("%s, but no move evens it out: each of its unpinned slots with load carries %s or more, and a move to %s may carry at most %s, or %s would end below the mean or %s above it%s",
			above, perSec(plan.Lightest), plan.Lo, perSec(plan.Gap), plan.Hi, plan.Lo, nothing)
	case shard.AllPinned:
		return fmt.Sprintf("%s, but all of it is in pinned slots, which rebalance leaves in place (allot shards pin --unpin)%s", above, nothing)
	case shard.MaxMoves:
		return fmt.Sprintf("%s: these are the --max-moves %d; run again once they are done", above, maxMoves)
	}
	if len(plan.Proposals) > 0 {
		return fmt.Sprintf("after these, every group is within %.0f%% of the mean", tolerance*100)
	}
	return fmt.Sprintf("balanced within %.0f%% of the mean: nothing to move", tolerance*100)
}

// perSec writes a load in key entries a second: whole numbers, or a
// decimal below 10, where a region just split may be.
func perSec(v float64) string {
	if v < 10 {
		return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64)
	}
	return fmt.Sprintf("%.0f", v)
}

// measureLoad reads every group leader's count of key entries per slot
// twice, sample apart, and returns the rate per slot.
func measureLoad(ctx context.Context, cf *clientFlags, m *shard.Map, sample time.Duration) (*[shard.Slots]float64, error) {
	read := func() (map[string]*allotpb.SlotLoadResponse, error) {
		out := map[string]*allotpb.SlotLoadResponse{}
		for _, g := range m.GroupIDs() {
			gf := *cf
			gf.coordinators = strings.Join(m.Groups[g], ",")
			gl, err := gf.dial()
			if err != nil {
				return nil, fmt.Errorf("group %s: %w", g, err)
			}
			// A group electing a leader answers a moment later: retry
			// within --timeout.
			deadline := time.Now().Add(cf.timeout)
			for {
				err = gf.once(ctx, gl, func(ctx context.Context, cc *grpc.ClientConn) error {
					r, err := allotpb.NewShardServiceClient(cc).SlotLoad(ctx, &allotpb.SlotLoadRequest{})
					out[g] = r
					return err
				})
				if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			gl.Close()
			if err != nil {
				return nil, fmt.Errorf("group %s's load: %w", g, err)
			}
		}
		return out, nil
	}
	first, err := read()
	if err != nil {
		return nil, err
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(sample):
	}
	second, err := read()
	if err != nil {
		return nil, err
	}
	var load [shard.Slots]float64
	for g, b := range second {
		a := first[g]
		secs := time.Duration(b.GetNowUnixNano() - a.GetNowUnixNano()).Seconds()
		if a.GetLeader() != b.GetLeader() || a.GetSinceUnixNano() != b.GetSinceUnixNano() {
			// A new leader began counting afresh: its count is the rate.
			secs = time.Duration(b.GetNowUnixNano() - b.GetSinceUnixNano()).Seconds()
			a = &allotpb.SlotLoadResponse{}
		}
		if secs <= 0 {
			continue
		}
		for s, n := range b.GetEntries() {
			if s < shard.Slots {
				load[s] += float64(n-min(n, a.GetEntries()[s])) / secs
			}
		}
	}
	return &load, nil
}
