package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/allot-io/allot/internal/fleet"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// summary closes the gateways (each flushes its usage), reads the ledger
// back, and checks everything the demo promises.
func (d *demo) summary(ctx context.Context) error {
	elapsed := d.end.Sub(d.start)
	if err := d.closeAgents(); err != nil {
		return fmt.Errorf("closing the gateways: %w", err)
	}
	// The leader has applied everything it acknowledged; a follower may
	// still be a few entries behind.
	var lead *fleet.Coordinator
	var leadStatus *fleet.MemberStatus
	err := d.cluster.Wait(ctx, 30*time.Second, "a leader to read the ledger from", func(ctx context.Context) (bool, string, error) {
		lead, leadStatus = d.cluster.Leader(ctx)
		return lead != nil, "no member leads", nil
	})
	if err != nil {
		return err
	}
	ledger, err := d.readLedger(ctx, lead)
	if err != nil {
		return fmt.Errorf("reading the ledger from %s: %w", lead.ID, err)
	}
	rejoin := d.checkRejoined(ctx, ledger, uint64(leadStatus.CommitIndex))
	var checks []check
	w := d.out
	fmt.Fprintf(w, "\n── summary after %v ──\n", elapsed.Round(time.Second))
	steady := (elapsed - d.warmup).Seconds()
	for _, t := range d.tenants {
		ratio := float64(t.steadyAdmitted.Load()) / (float64(t.quota) * steady)
		offered := t.rate + t.runaway
		fmt.Fprintf(w, "%-7s offered %.0f/s; admitted %.1f%% of its plan-quota (%d/s) after the first %v; refused %s\n",
			t.name, offered, 100*ratio, t.quota, d.warmup, refusals(t))
	}
	acme, globex := d.tenants[0], d.tenants[1]
	acmeRatio := float64(acme.steadyAdmitted.Load()) / (float64(acme.quota) * steady)
	checks = append(checks, check{fmt.Sprintf("acme, offered 1.5× its quota, admitted %.1f%% of it (want 95–105%%)", 100*acmeRatio), acmeRatio >= 0.95 && acmeRatio <= 1.05})
	wrong := acme.wrongful.Load() + globex.wrongful.Load()
	reqs := d.steadyRequests.Load()
	checks = append(checks, check{fmt.Sprintf("wrongful quota denials (refused while the tenant's fleet-wide admissions in the second before were %.0f%% or more under its quota, both when due): %d of %d requests after the first %v (%.4f%%; want ≤ 0.1%%; the traffic ran up to %v late)", 100*demoSlack, wrong, reqs, d.warmup, 100*float64(wrong)/float64(max(reqs, 1)), d.lag.max().Round(time.Millisecond)), float64(wrong) <= 0.001*float64(reqs)})
	gq := globex.steadyQuotaDeny.Load()
	checks = append(checks, check{fmt.Sprintf("globex, under its quota, refused by plan-quota %d times after the first %v (want 0); its runaway user refused by per-user %d times", gq, d.warmup, globex.refusedBy("per-user")), gq == 0 && globex.refusedBy("per-user") > 0})
	capRatio := float64(acme.steadyAdmitted.Load()+globex.steadyAdmitted.Load()) / (float64(d.capacity) * steady)
	fmt.Fprintf(w, "fleet   admitted %.1f%% of api-capacity (%d/s), which never bound\n", 100*capRatio, d.capacity)

	d.mu.Lock()
	pause, killed, elected := d.elected.Sub(d.killAt), !d.killAt.IsZero(), !d.elected.IsZero()
	d.mu.Unlock()
	checks = append(checks, check{fmt.Sprintf("leader %s SIGKILLed at half time (no shutdown, no leadership transfer); %s elected %v later: the coordinators' pause, while gateways kept deciding locally", d.oldLead, d.newLead, pause.Round(time.Millisecond)), killed && elected})
	checks = append(checks, rejoin)
	p99, p999, worst := d.lat.quantile(0.99), d.lat.quantile(0.999), d.lat.max()
	// A check that waited on the coordinators would have taken as long as
	// the failover: the slowest must be far below it. What a check took
	// while the machine did not run the demo's process at all is not the
	// gateway's doing (stallWatch): a stressed machine held one for 73 ms.
	beyond, took := d.stalls.worstUnexplained() // zero when no check took slowCheck
	stalled, longest := d.stalls.stalled()
	what := fmt.Sprintf("requests never paused: the slowest of %d checks took %v (p99 < %v, p99.9 < %v), while the coordinators paused %v", d.lat.count(), worst.Round(time.Microsecond), p99, p999, pause.Round(time.Millisecond))
	if stalled > 0 {
		what += fmt.Sprintf("; the machine did not run the demo for %v in all (at most %v at once), and no check took more than %v beyond that (one of %v; want < 50ms)",
			stalled.Round(time.Millisecond), longest.Round(time.Millisecond), beyond.Round(time.Microsecond), took.Round(time.Microsecond))
	}
	checks = append(checks, check{what, beyond < 50*time.Millisecond && beyond < pause/10})

	for _, t := range d.tenants {
		for _, r := range []string{"api-capacity", "plan-quota", "per-user"} {
			want := usageCount{admitted: uint64(t.admitted.Load()), denied: uint64(t.refusedBy(r))}
			got := ledger[[2]string{t.name, r}]
			checks = append(checks, check{fmt.Sprintf("ledger %s/%s: admitted %d, denied %d; the agents counted %d and %d", t.name, r, got.admitted, got.denied, want.admitted, want.denied), got == want})
		}
	}
	checks = append(checks, d.checkLogs())
	return reportChecks(w, checks)
}

// checkLogs checks that neither the gateways nor the coordinators logged
// an ERROR the demo's one fault, the leader's SIGKILL, does not explain.
func (d *demo) checkLogs() check {
	d.mu.Lock()
	killed, killAt, rejoined := d.killed, d.killAt, d.killAt.Add(d.rejoined)
	d.mu.Unlock()
	paths := append([]string{d.logFile.Name()}, d.cluster.LogPaths()...)
	bad, err := fleet.UnexpectedErrors(paths, demoExpectedErrors(killed, killAt, rejoined))
	if err != nil {
		return check{"no unexpected ERROR in the logs: " + err.Error(), false}
	}
	what := fmt.Sprintf("no ERROR in the gateways' and coordinators' logs but what the leader's SIGKILL explains: %d others", len(bad))
	for i, e := range bad {
		if i == 5 {
			what += fmt.Sprintf("\n       … and %d more", len(bad)-i)
			break
		}
		what += "\n       " + e.String()
	}
	return check{what, len(bad) == 0}
}

// demoExpectedErrors are the ERROR lines the leader's SIGKILL at killAt
// causes: the survivors' Raft failing to reach the killed member (votes,
// heartbeats, appends) until it is back, and the connections it had open
// to them reset while it died.
func demoExpectedErrors(killed *fleet.Coordinator, killAt, rejoined time.Time) []fleet.Expected {
	if killed == nil {
		return nil
	}
	return []fleet.Expected{{
		Pattern: regexp.MustCompile(`\[ERROR\] +allot\.raft: .*` + regexp.QuoteMeta(killed.Raft)),
		Why:     "the survivors' Raft cannot reach the member SIGKILLed at half time",
	}, {
		Pattern: regexp.MustCompile(`\[ERROR\] +allot\.raft: failed to decode incoming command: .*(connection reset by peer|EOF)`),
		Why:     "the connections the SIGKILLed member had open to the survivors end mid-command",
		From:    killAt.Add(-time.Second), To: rejoined.Add(5 * time.Second),
	}}
}

// reportChecks prints each check, and fails with errChecksFailed when
// any did.
func reportChecks(w io.Writer, checks []check) error {
	failed := 0
	fmt.Fprintln(w)
	for _, c := range checks {
		mark := "ok  "
		if !c.ok {
			mark = "FAIL"
			failed++
		}
		fmt.Fprintf(w, "%s %s\n", mark, c.what)
	}
	if failed > 0 {
		return fmt.Errorf("%w: %d of %d", errChecksFailed, failed, len(checks))
	}
	fmt.Fprintf(w, "\nall %d checks passed\n", len(checks))
	return nil
}

type check struct {
	what string
	ok   bool
}

type usageCount struct{ admitted, denied uint64 }

func (t *demoTenant) refusedBy(rule string) int64 {
	if c, ok := t.byRule.Load(rule); ok {
		return c.(*atomic.Int64).Load()
	}
	return 0
}

// checkRejoined checks that the member killed at half time came back: it
// follows the leader, it has applied at least commit (the leader's commit
// index once every gateway had flushed), and its copy of the ledger,
// rebuilt from what it had on disk at the SIGKILL and what it replayed
// from the leader, equals the leader's. No member may have exited by
// itself.
func (d *demo) checkRejoined(ctx context.Context, leader map[[2]string]usageCount, commit uint64) check {
	d.mu.Lock()
	m, took, crashed := d.killed, d.rejoined, slices.Clone(d.crashed)
	d.mu.Unlock()
	if m == nil {
		return check{"no member was killed, so none restarted", false}
	}
	what := fmt.Sprintf("%s, restarted from its data directory after the SIGKILL, rejoined as a follower %v later", m.ID, took.Round(time.Millisecond))
	if took == 0 {
		what = fmt.Sprintf("%s, restarted from its data directory after the SIGKILL, did not rejoin", m.ID)
	}
	var applied uint64
	err := d.cluster.Wait(ctx, 30*time.Second, m.ID+" to apply the leader's last entries", func(ctx context.Context) (bool, string, error) {
		st, err := d.cluster.Status(ctx, m)
		if err != nil {
			return false, err.Error(), nil
		}
		applied = uint64(st.AppliedIndex)
		return st.State == "Follower" && applied >= commit, fmt.Sprintf("state %s, applied index %d of %d", st.State, applied, commit), nil
	})
	if err != nil {
		return check{fmt.Sprintf("%s; %v", what, err), false}
	}
	own, err := d.readLedger(ctx, m)
	if err != nil {
		return check{fmt.Sprintf("%s; reading its ledger: %v", what, err), false}
	}
	same := maps.Equal(own, leader)
	what += fmt.Sprintf("; at index %d its ledger (%d tenant/rule lines) equals the leader's: %v", applied, len(own), same)
	if len(crashed) > 0 {
		what += fmt.Sprintf("; %s exited by itself", strings.Join(crashed, ", "))
	}
	return check{what, took > 0 && same && len(crashed) == 0}
}

// readLedger sums member m's copy of the replicated ledger per tenant and
// rule.
func (d *demo) readLedger(ctx context.Context, m *fleet.Coordinator) (map[[2]string]usageCount, error) {
	q := &allotpb.UsageQuery{From: timestamppb.New(d.start.Add(-2 * time.Hour)), To: timestamppb.New(time.Now().Add(2 * time.Hour))}
	lines, err := fetchLedger(ctx, demoOperator(d.cluster.Creds, m.GRPC), q, 0)
	if err != nil {
		return nil, err
	}
	out := map[[2]string]usageCount{}
	for _, l := range lines {
		k := [2]string{l.Tenant, l.Rule}
		c := out[k]
		c.admitted += l.Admitted
		c.denied += l.Denied
		out[k] = c
	}
	return out, nil
}
