package state

import (
	"fmt"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/ledger"
	"pgregory.net/rapid"
)

const agentTimeout = int64(15 * time.Minute)

func maintainAt(t *testing.T, f *machine, at time.Time) {
	t.Helper()
	f.Apply(entry(t, 0, CmdMaintain, &fsmpb.MaintainCommand{NowUnixNano: at.UnixNano(), AgentTimeoutNano: agentTimeout}))
}

func exported(t *testing.T, f *machine, pos ledger.Position) {
	t.Helper()
	f.Apply(entry(t, 0, CmdExported|Ignorable, &fsmpb.ExportedCommand{Position: PositionProto(pos)}))
}

func keysOf(lines []ledger.Line) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = fmt.Sprintf("%d/%s", l.Key.Window-hour0.Unix(), l.Key.Tenant)
	}
	return out
}

// TestExportTakesFinalLinesOnceInOrder: the exporter is given final lines
// in the ledger's order, page after page; a committed position drops them
// from memory and from snapshots, and a repeated or older position
// changes nothing.
func TestExportTakesFinalLinesOnceInOrder(t *testing.T) {
	f := testFSM()
	f.Apply(entry(t, 0, CmdSettings, &fsmpb.SettingsCommand{BillingWindowNano: int64(time.Hour)}))
	for i, tenant := range []string{"c", "a", "b"} {
		f.Apply(entry(t, 0, CmdReports, usageCmd(hour0.Add(time.Minute), "gw-1", 1, uint64(i+1), tenant, 10, 1)))
	}
	f.Apply(entry(t, 0, CmdReports, usageCmd(hour0.Add(61*time.Minute), "gw-1", 1, 4, "a", 5, 0)))
	if got := f.st.ExportPage(10); len(got) != 0 {
		t.Fatalf("before any window is final the exporter got %v", keysOf(got))
	}
	// The first hour is final once gw-1 reported past its end; the
	// second is still open.
	maintainAt(t, f, hour0.Add(62*time.Minute))
	page := f.st.ExportPage(2)
	if got := fmt.Sprint(keysOf(page)); got != "[0/a 0/b]" {
		t.Fatalf("first page %s, want [0/a 0/b]", got)
	}
	pos := ledger.Position{}.Advance(page)
	exported(t, f, pos)
	if got := fmt.Sprint(keysOf(f.st.ExportPage(10))); got != "[0/c]" {
		t.Fatalf("after the first batch the exporter got %s, want [0/c]", got)
	}
	if n := f.st.LedgerLen(); n != 2 {
		t.Fatalf("the ledger holds %d lines after exporting 2 of 4, want 2", n)
	}
	before := dumpState(f.st)
	exported(t, f, pos)                        // a retried proposal
	exported(t, f, ledger.Position{Set: true}) // an older leader's
	if after := dumpState(f.st); after != before {
		t.Fatalf("a repeated position changed the state:\n%s\nwant\n%s", after, before)
	}
	if got := roundTrip(t, f); dumpState(got.st) != before {
		t.Fatalf("a snapshot lost the export position:\n%s\nwant\n%s", dumpState(got.st), before)
	}
	page = f.st.ExportPage(10)
	exported(t, f, pos.Advance(page))
	if got := f.st.Exported(); got.Lines != 3 || got.Batches != 2 || got.Last.Tenant != "c" {
		t.Fatalf("position %+v, want 3 lines in 2 batches up to c", got)
	}
	if lines, _, ok := f.st.ExportBacklog(); ok || lines != 0 {
		t.Fatalf("backlog %d lines after everything final was exported", lines)
	}
}

// TestExportWaitsForAnOlderOpenWindow: a window that became final while
// an older one still waits on a slow agent is not exported before it,
// so that nothing ever lands below the position.
func TestExportWaitsForAnOlderOpenWindow(t *testing.T) {
	f := testFSM()
	f.Apply(entry(t, 0, CmdSettings, &fsmpb.SettingsCommand{BillingWindowNano: int64(time.Hour)}))
	// An agent whose batch, cut in the first hour, arrives late: it is
	// not acknowledged past the hour's end yet, and not silent for long.
	slow := usageCmd(hour0.Add(time.Minute), "slow", 1, 1, "a", 1, 0)
	slow.ProposedUnixNano = hour0.Add(121 * time.Minute).UnixNano()
	f.Apply(entry(t, 0, CmdReports, usageCmd(hour0.Add(61*time.Minute), "gw-1", 1, 1, "b", 1, 0)))
	f.Apply(entry(t, 0, CmdReports, slow))
	f.Apply(entry(t, 0, CmdReports, usageCmd(hour0.Add(121*time.Minute), "gw-1", 1, 2, "b", 1, 0)))
	maintainAt(t, f, hour0.Add(122*time.Minute))
	if !f.st.final.Has(hour0.Unix()+3600) || f.st.final.Has(hour0.Unix()) {
		t.Log(dumpState(f.st))
		t.Fatal("want the second hour final and the first still open")
	}
	if got := f.st.ExportPage(10); len(got) != 0 {
		t.Fatalf("the exporter got %v while an older window is open", keysOf(got))
	}
	if lines, oldest, ok := f.st.ExportBacklog(); !ok || lines != 1 || oldest != hour0.Unix()+3600 {
		t.Fatalf("backlog %d lines from %d (%v), want 1 from the second hour", lines, oldest, ok)
	}
	// The slow agent times out: the first hour is final too.
	maintainAt(t, f, hour0.Add(122*time.Minute+time.Duration(agentTimeout)))
	if got := fmt.Sprint(keysOf(f.st.ExportPage(10))); got != "[0/a 3600/b]" {
		t.Fatalf("the exporter got %s, want [0/a 3600/b]", got)
	}
}

// TestLateLinesLeaveExportedWindowsAlone: usage and grants that arrive
// for a window already final are carried into the window open when they
// arrive, so that an exported line is never written again.
func TestLateLinesLeaveExportedWindowsAlone(t *testing.T) {
	f := testFSM()
	f.Apply(entry(t, 0, CmdSettings, &fsmpb.SettingsCommand{BillingWindowNano: int64(time.Hour)}))
	f.Apply(entry(t, 0, CmdReports, usageCmd(hour0.Add(time.Minute), "gw-1", 1, 1, "a", 10, 0)))
	f.Apply(entry(t, 0, CmdReports, usageCmd(hour0.Add(61*time.Minute), "gw-1", 1, 2, "a", 1, 0)))
	maintainAt(t, f, hour0.Add(62*time.Minute))
	page := f.st.ExportPage(10)
	exported(t, f, ledger.Position{}.Advance(page))
	late := hour0.Add(70 * time.Minute)
	report := usageCmd(hour0.Add(30*time.Minute), "gw-2", 1, 1, "a", 7, 0)
	report.ProposedUnixNano = late.UnixNano()
	f.Apply(entry(t, 0, CmdReports, report))
	f.Apply(entry(t, 0, CmdGrants|Ignorable, &fsmpb.GrantsCommand{Epoch: 1, Seq: 1, Region: "eu-west", ProposedUnixNano: late.UnixNano(),
		Grants: []*fsmpb.GrantRecord{{Tenant: "a", Rule: "plan-quota", WindowUnix: hour0.Unix(), Granted: 3}}}))
	got := dumpLedger(f.st)
	want := fmt.Sprintf("ledger a/plan-quota/eu-west/%d 8 0 granted 3", hour0.Unix()+3600)
	if len(got) != 1 || got[0] != want {
		t.Fatalf("ledger %q, want [%q]", got, want)
	}
}

// TestRetentionCountsWhatItDrops: retention is the bound on what waits for
// a sink that is away; the lines it drops are counted.
func TestRetentionCountsWhatItDrops(t *testing.T) {
	f := testFSM()
	f.Apply(entry(t, 0, CmdSettings, &fsmpb.SettingsCommand{BillingWindowNano: int64(time.Hour)}))
	for i, tenant := range []string{"a", "b", "c"} {
		f.Apply(entry(t, 0, CmdReports, usageCmd(hour0.Add(time.Minute), "gw-1", 1, uint64(i+1), tenant, 1, 0)))
	}
	at := hour0.Add(3 * time.Hour)
	f.Apply(entry(t, 0, CmdMaintain, &fsmpb.MaintainCommand{NowUnixNano: at.UnixNano(), AgentTimeoutNano: agentTimeout, RetentionNano: int64(time.Hour)}))
	if n, ln := f.st.RetentionDropped(), f.st.LedgerLen(); n != 3 || ln != 0 {
		t.Fatalf("retention dropped %d lines and left %d, want 3 and 0", n, ln)
	}
	if got := roundTrip(t, f).st.RetentionDropped(); got != 3 {
		t.Fatalf("after a snapshot retention has dropped %d lines, want 3", got)
	}
}

// TestExportIsExact: whatever the order of reports, maintenance and
// exports, every unit applied is either in a batch the sink committed or
// still in the ledger, never both, and no line is exported twice.
func TestExportIsExact(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		f := testFSM()
		f.Apply(entry(t, 0, CmdSettings, &fsmpb.SettingsCommand{BillingWindowNano: int64(time.Hour)}))
		var applied, sunk uint64
		seen := map[ledger.Key]bool{}
		seq := map[string]uint64{}
		now := hour0
		for step := range rapid.IntRange(1, 60).Draw(rt, "steps") {
			switch rapid.IntRange(0, 3).Draw(rt, fmt.Sprint("op", step)) {
			case 0: // a report, possibly late
				node := rapid.SampledFrom([]string{"gw-1", "gw-2", "gw-3"}).Draw(rt, "node")
				age := time.Duration(rapid.IntRange(0, 150).Draw(rt, "age")) * time.Minute
				n := uint64(rapid.IntRange(1, 9).Draw(rt, "n"))
				seq[node]++
				cmd := usageCmd(now.Add(-age), node, 1, seq[node], rapid.SampledFrom([]string{"a", "b", "c", "d"}).Draw(rt, "tenant"), n, 0)
				cmd.ProposedUnixNano = now.UnixNano()
				cmd.Reports[0].Batch.CutUnixNano = now.UnixNano()
				f.Apply(entry(t, 0, CmdReports, cmd))
				applied += n
			case 1:
				now = now.Add(time.Duration(rapid.IntRange(1, 40).Draw(rt, "advance")) * time.Minute)
			case 2:
				maintainAt(t, f, now)
			case 3: // the sink commits a page; sometimes the proposal is repeated
				page := f.st.ExportPage(rapid.IntRange(1, 5).Draw(rt, "limit"))
				if len(page) == 0 {
					continue
				}
				for _, l := range page {
					if seen[l.Key] {
						rt.Fatalf("line %v exported twice", l.Key)
					}
					seen[l.Key] = true
					sunk += l.Admitted
				}
				pos := f.st.Exported().Advance(page)
				exported(t, f, pos)
				if rapid.Bool().Draw(rt, "repeat") {
					exported(t, f, pos)
				}
			}
		}
		var held uint64
		f.st.eachLine(func(_ ledger.Key, u usage) { held += u.admitted })
		counted := f.st.finalLines
		if f.st.countFinalLines(); f.st.finalLines != counted {
			rt.Fatalf("the state counts %d final lines, the ledger holds %d", counted, f.st.finalLines)
		}
		if sunk+held != applied {
			rt.Fatalf("sink %d + ledger %d = %d units, %d applied", sunk, held, sunk+held, applied)
		}
	})
}
