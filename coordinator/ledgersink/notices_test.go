package ledgersink_test

import (
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/ledgersink"
)

// TestWriteNotices: notices are stored once per cluster and key; a
// notice written again, as a leader that failed over writes it, is left
// as it was, and a name holding NUL is stored escaped.
func TestWriteNotices(t *testing.T) {
	s, dsn := migrated(t)
	conn := connect(t, dsn)
	start := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	n := func(tenant string, th float64, used uint64) ledgersink.Notice {
		return ledgersink.Notice{
			Key: tenant + "/q/1796256000/" + map[float64]string{0.8: "0.8", 1: "1"}[th], Tenant: tenant, Rule: "q",
			CycleStart: start, CycleEnd: start.Add(720 * time.Hour), Threshold: th, Limit: 100, Used: used,
			CrossedAt: start.Add(time.Hour),
		}
	}
	if err := s.WriteNotices(ctxFor(t, 10*time.Second), "c1", []ledgersink.Notice{n("acme", 0.8, 81), n("a\x00b", 1, 100)}); err != nil {
		t.Fatal(err)
	}
	again := n("acme", 0.8, 99)
	if err := s.WriteNotices(ctxFor(t, 10*time.Second), "c1", []ledgersink.Notice{again, n("acme", 1, 101)}); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteNotices(ctxFor(t, 10*time.Second), "c2", []ledgersink.Notice{again}); err != nil {
		t.Fatal(err)
	}
	if got := scalar[int64](t, conn, "SELECT count(*) FROM allot_notices"); got != 4 {
		t.Errorf("%d rows, want 4: one per cluster and key", got)
	}
	if got := scalar[int64](t, conn, "SELECT used FROM allot_notices WHERE cluster_id = 'c1' AND key = 'acme/q/1796256000/0.8'"); got != 81 {
		t.Errorf("the notice written again changed its row: used %d, want the first write's 81", got)
	}
	if got := scalar[string](t, conn, "SELECT tenant FROM allot_notices WHERE cluster_id = 'c1' AND threshold = 1 AND tenant <> 'acme'"); ledgersink.LoadedName(got) != "a\x00b" {
		t.Errorf("tenant stored as %q", got)
	}
}
