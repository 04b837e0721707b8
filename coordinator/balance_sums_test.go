package coordinator

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/coordinator/internal/authz"
	"github.com/allot-io/allot/coordinator/internal/fsm"
	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/allot-io/allot/internal/timeutil"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/ledger"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/proto/rulespb"
	"github.com/allot-io/allot/rules"
	"google.golang.org/protobuf/proto"
)

// stepClock is the system's timers with a Now the test moves.
type stepClock struct {
	timeutil.System
	t *time.Time
}

func (c stepClock) Now() time.Time { return *c.t }

// memSink is a raft.SnapshotSink in memory.
type memSink struct{ bytes.Buffer }

func (*memSink) ID() string    { return "mem" }
func (*memSink) Cancel() error { return nil }
func (*memSink) Close() error  { return nil }

// TestBalanceSumsFollowTheLedger: the sums a member keeps of final
// windows (finalSums) never make a balance differ from the ledger's own
// count, whatever happens to the windows: reports in the open window and
// late ones into old windows (opened again, or carried into the open one
// once final), windows becoming final, a cycle renewing, and a restore
// that swaps in an older state. Each balance is checked against a sum of
// every line, from seeded random steps.
func TestBalanceSumsFollowTheLedger(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { balanceSumsScenario(t, seed) })
	}
}

func balanceSumsScenario(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 44))
	f := testFSM()
	idx := uint64(0)
	now := hour0
	step := func(ct state.Command, m proto.Message) { idx++; f.Apply(entry(t, idx, ct, m)) }
	step(state.CmdSettings, &fsmpb.SettingsCommand{BillingWindowNano: int64(time.Minute)})
	hourly := rules.Rule{Name: "hourly", Scope: rules.Tenant, Algorithm: algo.FixedWindow, Limit: 1_000_000, Period: time.Hour, Intent: lease.Quota}
	step(state.CmdRules, &fsmpb.RulesCommand{Put: []*allotpb.Rule{rulespb.ToProto(&hourly)}})
	c := &Coordinator{fsm: f, authz: &authz.Authorizer{}, cfg: Config{Clock: stepClock{t: &now}, ReportInterval: time.Second, LedgerRetention: KeepLedger}}

	// want is the ledger's count of acme's lines in the balance's range.
	want := func(rb *allotpb.RuleBalance) (n uint64) {
		from, to := rb.GetCountedFrom().AsTime().Unix(), rb.GetRenewsAt().AsTime().Unix()
		f.Read(func(st *state.State) {
			st.Ledger(func(l ledger.Line) bool {
				if l.Key.Tenant == "acme" && l.Key.Rule == "hourly" && l.Key.Window >= from && l.Key.Window < to {
					n += l.Admitted
				}
				return true
			})
		})
		return n
	}
	check := func(when string) {
		t.Helper()
		got := c.balance("acme", "")
		if len(got.GetRules()) != 1 {
			t.Fatalf("%s: %v", when, got)
		}
		if rb := got.GetRules()[0]; rb.GetUsed() != want(rb) {
			t.Fatalf("%s: used %d, the ledger counts %d", when, rb.GetUsed(), want(rb))
		}
	}
	var (
		seq      uint64
		snapshot []byte
	)
	for i := 0; i < 150; i++ {
		now = now.Add(time.Duration(20+rng.IntN(40)) * time.Second)
		switch r := rng.IntN(10); {
		case r < 6: // a report, now or late
			window := now
			if rng.IntN(3) == 0 {
				window = now.Add(-time.Duration(rng.IntN(40)) * time.Minute)
			}
			tenant := "acme"
			if rng.IntN(3) == 0 {
				tenant = "initech"
			}
			seq++
			step(state.CmdReports, &fsmpb.ReportsCommand{ProposedUnixNano: now.UnixNano(), Reports: []*fsmpb.AgentUsage{{
				Node: fmt.Sprintf("gw-%d", rng.IntN(3)), Incarnation: 1, Region: "eu-west",
				Batch: &allotpb.UsageBatch{Seq: seq, CutUnixNano: now.UnixNano(), Counts: []*allotpb.UsageCount{
					{Rule: "hourly", Tenant: tenant, WindowUnix: window.Unix(), Admitted: uint64(1 + rng.IntN(100))},
				}},
			}}})
		case r < 9: // maintenance: windows become final
			step(state.CmdMaintain, &fsmpb.MaintainCommand{NowUnixNano: now.UnixNano(), AgentTimeoutNano: int64(2 * time.Minute)})
		default: // a snapshot kept, or an older state restored
			if snapshot == nil || rng.IntN(2) == 0 {
				snapshot = persistFSM(t, f)
				break
			}
			if err := f.Restore(io.NopCloser(bytes.NewReader(snapshot))); err != nil {
				t.Fatal(err)
			}
			seq += 1000 // the restored state knows older batches only
		}
		check(fmt.Sprintf("step %d at %s", i, now.Format(time.TimeOnly)))
	}
}

// persistFSM snapshots f and returns the snapshot's bytes.
func persistFSM(t *testing.T, f *fsm.FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	return sink.Bytes()
}

// TestBalanceSumsForgottenOnRestore: a restore swaps in another state,
// whose final windows may be as many as the sums kept were read from but
// hold other counts: its balance is its own ledger's.
func TestBalanceSumsForgottenOnRestore(t *testing.T) {
	now := hour0.Add(50 * time.Minute)
	hourly := rules.Rule{Name: "hourly", Scope: rules.Tenant, Algorithm: algo.FixedWindow, Limit: 1_000_000, Period: time.Hour, Intent: lease.Quota}
	// history is a state whose first 30 minute windows hold acme's n units
	// each, all final.
	history := func(n uint64) []byte {
		f := testFSM()
		f.Apply(entry(t, 1, state.CmdSettings, &fsmpb.SettingsCommand{BillingWindowNano: int64(time.Minute)}))
		f.Apply(entry(t, 2, state.CmdRules, &fsmpb.RulesCommand{Put: []*allotpb.Rule{rulespb.ToProto(&hourly)}}))
		for m := 0; m < 30; m++ {
			at := hour0.Add(time.Duration(m) * time.Minute)
			f.Apply(entry(t, uint64(3+m), state.CmdReports, &fsmpb.ReportsCommand{ProposedUnixNano: at.UnixNano(), Reports: []*fsmpb.AgentUsage{{
				Node: "gw-1", Incarnation: 1, Region: "eu-west",
				Batch: &allotpb.UsageBatch{Seq: uint64(1 + m), CutUnixNano: at.UnixNano(), Counts: []*allotpb.UsageCount{{Rule: "hourly", Tenant: "acme", WindowUnix: at.Unix(), Admitted: n}}},
			}}}))
		}
		f.Apply(entry(t, 100, state.CmdMaintain, &fsmpb.MaintainCommand{NowUnixNano: now.UnixNano(), AgentTimeoutNano: int64(time.Minute)}))
		return persistFSM(t, f)
	}
	f := testFSM()
	c := &Coordinator{fsm: f, authz: &authz.Authorizer{}, cfg: Config{Clock: stepClock{t: &now}, ReportInterval: time.Second, LedgerRetention: KeepLedger}}
	for _, n := range []uint64{2, 3, 2} {
		if err := f.Restore(io.NopCloser(bytes.NewReader(history(n)))); err != nil {
			t.Fatal(err)
		}
		if got := c.balance("acme", "").GetRules(); len(got) != 1 || got[0].GetUsed() != 30*n {
			t.Fatalf("after restoring a state of %d units a window: %v, want %d used", n, got, 30*n)
		}
	}
}
