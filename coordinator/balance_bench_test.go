package coordinator

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/coordinator/internal/authz"
	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/allot-io/allot/internal/testwait"
	"github.com/allot-io/allot/internal/timeutil"
	"github.com/allot-io/allot/lease"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/proto/rulespb"
	"github.com/allot-io/allot/rules"
)

// A month of a fleet's usage, as a balance reads it: hourly billing
// windows (the default) over 30 days, balanceTenants tenants in each,
// and a plan quota whose cycle is the 30 days.
const (
	balanceWindows = 30 * 24
	balanceTenants = 1_000
)

// monthlyRule is a quota over a 30-day cycle: every window of the month
// is in it.
var monthlyRule = rules.Rule{Name: "plan-quota", Scope: rules.Tenant, Algorithm: algo.FixedWindow, Limit: 10_000_000, Period: 30 * 24 * time.Hour, Intent: lease.Quota}

// balanceMonth is the start of a 30-day cycle (rules.Rule.CycleAt aligns cycles on
// multiples of the period since the epoch), and the ledger's first window.
var balanceMonth = time.Unix(0, 0).Add(time.Duration(hour0.UnixNano() / int64(monthlyRule.Period) * int64(monthlyRule.Period))).UTC()

// atClock is the system's timers with a fixed Now.
type atClock struct {
	timeutil.System
	t time.Time
}

func (c atClock) Now() time.Time { return c.t }

// BenchmarkBalance is GET /v1/balance on a member whose ledger holds a
// month of hourly windows for 1,000 tenants (720,000 lines), all final
// but the last: "month" a rule whose cycle is the whole month, its final
// windows' sum kept from the first answer (finalSums) and the open window
// read; "month-first" the same with nothing kept, a seek per window (720);
// "day" a rule whose cycle is the last day. Any member answers so, from its memory; a follower's state
// is the leader's, applied from the same log.
//
//	go test -run '^$' -bench Balance -benchtime 2000x ./coordinator
func BenchmarkBalance(b *testing.B) {
	f := testFSM()
	f.Apply(entry(b, 1, state.CmdSettings, &fsmpb.SettingsCommand{BillingWindowNano: int64(time.Hour)}))
	daily := monthlyRule
	daily.Period = 24 * time.Hour // the same rule, the lines fillLedger made
	f.Apply(entry(b, 2, state.CmdRules, &fsmpb.RulesCommand{Put: []*allotpb.Rule{rulespb.ToProto(&monthlyRule)}}))
	for w := 0; w < balanceWindows; w++ {
		fillLedger(b, f, uint64(3+w), balanceTenants, "eu-west", balanceMonth.Add(time.Duration(w)*time.Hour))
	}
	now := balanceMonth.Add(balanceWindows*time.Hour - time.Minute) // the cycle's last minute
	// Every window but the last is final, as a leader's maintenance makes
	// them an agent timeout after they end.
	f.Apply(entry(b, 9_999, state.CmdMaintain, &fsmpb.MaintainCommand{NowUnixNano: now.UnixNano(), AgentTimeoutNano: int64(time.Minute)}))
	c := &Coordinator{fsm: f, authz: &authz.Authorizer{}, cfg: Config{Clock: atClock{t: now}, ReportInterval: time.Second, LedgerRetention: KeepLedger}}
	// The tenant fillLedger gives i+1 units a window.
	tenant, per := "tenant-0000420", uint64(421)
	req := httptest.NewRequest(http.MethodGet, "/v1/balance?tenant="+tenant, nil)
	for i, tc := range []struct {
		name    string
		rule    rules.Rule
		windows uint64
		cold    bool // each answer reads every window, as a member's first for the tenant does
	}{{"month", monthlyRule, balanceWindows, false}, {"month-first", monthlyRule, balanceWindows, true}, {"day", daily, 24, false}} {
		f.Apply(entry(b, uint64(10_000+i), state.CmdRules, &fsmpb.RulesCommand{Put: []*allotpb.Rule{rulespb.ToProto(&tc.rule)}, ReplaceAll: true}))
		want := fmt.Sprintf(`"used":"%d"`, per*tc.windows)
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if tc.cold {
					c.sums = finalSums{}
				}
				w := httptest.NewRecorder()
				c.balanceHTTP(w, req)
				if w.Code != http.StatusOK || (i == 0 && !bytes.Contains(w.Body.Bytes(), []byte(want))) {
					b.Fatalf("%d %s, want %s", w.Code, w.Body, want)
				}
			}
		})
	}
}

// TestBalanceFollowerP99 is a harness, not a test: with
// ALLOT_BALANCE_HARNESS=1 it starts three members on loopback, their clock
// in the last hour of a 30-day cycle, writes the cycle's hourly windows
// for 1,000 tenants (720,000 lines) through the leader's log, and asks a follower GET /v1/balance for random tenants at
// 1,000 requests a second for ALLOT_BALANCE_SECONDS (default 10), open
// loop (each request at its time, whether or not the last has been
// answered), and prints the latency percentiles the client saw. It
// asserts nothing of them: a shared machine's figures are for reading.
//
//	ALLOT_BALANCE_HARNESS=1 go test -run TestBalanceFollowerP99 -v ./coordinator
func TestBalanceFollowerP99(t *testing.T) {
	if os.Getenv("ALLOT_BALANCE_HARNESS") == "" {
		t.Skip("a harness: ALLOT_BALANCE_HARNESS=1 runs it")
	}
	seconds := 10
	if s := os.Getenv("ALLOT_BALANCE_SECONDS"); s != "" {
		fmt.Sscan(s, &seconds)
	}
	// ALLOT_BALANCE_CYCLE=day makes the rule's cycle the last day of the
	// month (24 windows) rather than the month (720).
	rule := monthlyRule
	if os.Getenv("ALLOT_BALANCE_CYCLE") == "day" {
		rule.Period = 24 * time.Hour
	}
	// The members' clock stands in the last hour of a 30-day cycle, so
	// that the whole month of windows is in it, each filled.
	month := time.Unix(0, time.Now().UnixNano()/int64(monthlyRule.Period)*int64(monthlyRule.Period)).UTC()
	end := month.Add(monthlyRule.Period - time.Minute)
	nodes := cluster(t, 3, func(c *Config) { c.LedgerRetention, c.Clock = KeepLedger, atClock{t: end} })
	l := waitLeader(t, nodes)
	var f *Coordinator
	for _, c := range nodes {
		if c != l {
			f = c
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := l.apply(ctx, state.CmdRules, &fsmpb.RulesCommand{Put: []*allotpb.Rule{rulespb.ToProto(&rule)}}, time.Minute); err != nil {
		t.Fatal(err)
	}
	windows := 0
	for at := month; windows < balanceWindows; at = at.Add(time.Hour) {
		cmd := &fsmpb.ReportsCommand{ProposedUnixNano: at.UnixNano()}
		b := &allotpb.UsageBatch{Seq: 1, CutUnixNano: at.UnixNano()}
		for i := 0; i < balanceTenants; i++ {
			b.Counts = append(b.Counts, &allotpb.UsageCount{Rule: monthlyRule.Name, Tenant: fmt.Sprintf("tenant-%07d", i), WindowUnix: at.Unix(), Admitted: uint64(i + 1)})
		}
		cmd.Reports = append(cmd.Reports, &fsmpb.AgentUsage{Node: fmt.Sprintf("gw-%d", at.Unix()), Incarnation: 1, Region: "eu-west", Batch: b})
		if _, err := l.apply(ctx, state.CmdReports, cmd, time.Minute); err != nil {
			t.Fatal(err)
		}
		windows++
	}
	lines := windows * balanceTenants
	testwait.For(t, time.Minute, "the follower to hold every line", func() bool {
		n := 0
		f.fsm.Read(func(s *state.State) { n = s.LedgerLen() })
		return n >= lines
	})

	finals := 0
	testwait.For(t, time.Minute, "the month's windows to be final on the follower", func() bool {
		f.fsm.Read(func(s *state.State) { finals, _ = s.FinalIn(month.Unix(), end.Unix()) })
		return finals >= windows-1
	})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 10 * time.Second}
	base := "http://" + f.HTTPAddr() + "/v1/balance?tenant="
	// A first answer for each tenant reads every window of its cycle; the
	// follower keeps the final windows' sums from then on (finalSums), as
	// it does for a dashboard that polls.
	warm := time.Now()
	for i := 0; i < balanceTenants; i++ {
		resp, err := client.Get(base + fmt.Sprintf("tenant-%07d", i))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	t.Logf("first answers, one per tenant, one at a time: %s each on average", (time.Since(warm) / balanceTenants).Round(time.Microsecond))
	const rate = 1000
	total := seconds * rate
	lat := make([]time.Duration, total)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed int
	)
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	began := time.Now()
	for i := 0; i < total; i++ {
		<-tick.C
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			url := base + fmt.Sprintf("tenant-%07d", rand.IntN(balanceTenants))
			t0 := time.Now()
			resp, err := client.Get(url)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			lat[i] = time.Since(t0)
			if err != nil || resp.StatusCode != http.StatusOK {
				mu.Lock()
				failed++
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	elapsed := time.Since(began)
	slices.Sort(lat)
	q := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	t.Logf("GET /v1/balance on a follower, ledger of %d lines (%d hourly windows × %d tenants), a cycle of %s: %d requests in %s (%.0f/s), %d failed",
		lines, windows, balanceTenants, rule.Period, total, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds(), failed)
	t.Logf("latency seen by the client: p50 %s  p90 %s  p99 %s  p99.9 %s  max %s",
		q(0.50), q(0.90), q(0.99), q(0.999), lat[len(lat)-1])
}
