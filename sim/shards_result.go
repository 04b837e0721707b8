package sim

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// ShardsResult is what a run with shards measured of the groups.
type ShardsResult struct {
	Groups int `json:"groups"`
	// CapacityPerLeader is each leader's key entries a second, 0 for no
	// limit; Scale, the entries of cost each simulated one counted for.
	CapacityPerLeader float64 `json:"capacity_per_leader"`
	Scale             float64 `json:"scale"`
	// EntriesPerSecond are the key entries offered to all leaders a
	// second after the warm-up, scaled.
	EntriesPerSecond float64     `json:"entries_per_second"`
	PerGroup         []GroupLoad `json:"per_group"`
	// RefusedAsMoved counts the parts of reports a group refused because
	// their usage held a slot it did not own.
	RefusedAsMoved int64        `json:"refused_as_moved"`
	Moves          []MoveResult `json:"moves,omitempty"`
	// UsageWaited counts the usage counts refused as moved and later
	// taken by their new owner, UnitsWaited their requests; MeanWait and
	// MaxWait, from the first refusal to the acknowledgement.
	UsageWaited int           `json:"usage_waited"`
	UnitsWaited int64         `json:"units_waited"`
	MeanWait    time.Duration `json:"mean_wait_ns"`
	MaxWait     time.Duration `json:"max_wait_ns"`
	// StillWaiting counts usage counts refused as moved and taken by no
	// group by the end of the run.
	StillWaiting int `json:"still_waiting"`
	// MovedTenants is the run over the move's window for the tenants in
	// the moved slots only.
	MovedTenants *Span `json:"moved_tenants,omitempty"`
	MovedCount   int   `json:"moved_tenants_count,omitempty"`
}

// GroupLoad is one group's leader over the run after the warm-up.
type GroupLoad struct {
	Group            string        `json:"group"`
	Slots            int           `json:"slots_at_end"`
	EntriesPerSecond float64       `json:"entries_per_second"`
	P99QueueDelay    time.Duration `json:"p99_queue_delay_ns"`
	Utilisation      float64       `json:"utilisation"`
	// Timeouts are reports whose deadline passed before the leader
	// started on them.
	Timeouts int64 `json:"timeouts"`
}

// MoveResult is one move of slots.
type MoveResult struct {
	First, Last, To int
	At              time.Duration `json:"at_ns"`
	// Took is from the plan to the map routing the slots to their new
	// group, -1 when it never did.
	Took       time.Duration `json:"took_ns"`
	MapVersion uint64        `json:"map_version"`
}

// writeShards prints each strategy's groups and move.
func writeShards(w io.Writer, s *Scenario, results []*Result) error {
	g := s.Shards
	fmt.Fprintf(w, "shards: %d groups (group 0 home), leader capacity %.0f key entries/s, each simulated entry counts %g, a move's steps %v apart\n",
		g.Groups, g.capacity(), g.scale(), g.step())
	for _, r := range results {
		sr := r.Shards
		if sr == nil {
			continue
		}
		limit := "no limit"
		if sr.CapacityPerLeader > 0 {
			limit = fmt.Sprintf("%.2f M/s each", sr.CapacityPerLeader/1e6)
		}
		fmt.Fprintf(w, "\n%s: %d group(s), %s; offered %.2f M key entries/s in all\n", r.Strategy, sr.Groups, limit, sr.EntriesPerSecond/1e6)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "group\tslots\tkey entries/s\tp99 queue delay\tutilisation\ttimed out\t")
		for _, gl := range sr.PerGroup {
			util := "-"
			if sr.CapacityPerLeader > 0 {
				util = fmt.Sprintf("%.1f%%", 100*gl.Utilisation)
			}
			fmt.Fprintf(tw, "%s\t%d\t%.0f\t%v\t%s\t%d\t\n", gl.Group, gl.Slots, gl.EntriesPerSecond, gl.P99QueueDelay.Round(10*time.Microsecond), util, gl.Timeouts)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, m := range sr.Moves {
			took := "not applicable (one group)"
			if sr.Groups > 1 {
				took = "never done"
				if m.Took >= 0 {
					took = fmt.Sprintf("done in %v, map version %d", m.Took, m.MapVersion)
				}
			}
			fmt.Fprintf(w, "move of slots %d-%d to g%d at %v: %s; parts refused as moved %d; %d usage counts (%d requests) waited, mean %v, max %v; %d still waiting at the end\n",
				m.First, m.Last, m.To, m.At, took, sr.RefusedAsMoved, sr.UsageWaited, sr.UnitsWaited, sr.MeanWait.Round(time.Millisecond), sr.MaxWait.Round(time.Millisecond), sr.StillWaiting)
		}
		if d := sr.MovedTenants; d != nil {
			fmt.Fprintf(w, "the moved slots' %d tenants, %v to %v: admitted ÷ due %.2f%%, peak %.2f%%, wrongful %.4f%%, leaked %.4f%%\n",
				sr.MovedCount, d.From, d.To, 100*d.AdmittedRatio, 100*d.PeakOvershoot, 100*d.WrongfulDenials, 100*d.Leaked)
		}
	}
	return nil
}
