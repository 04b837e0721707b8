package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/internal/testwait"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
)

// TestPromotionKeepsCount: a key becomes hot (its own limiter) while
// checks on it go on, from several goroutines, on a process that has just
// started and asks for every key at once. What the unleased state admitted
// up to the switch, and what checks already past their read of the hot
// keys admit there, counts against the hot key: a window's limit is never
// exceeded by the switch. The cluster is out of reach, so the limit is the
// whole of it for the one node the rules cache names.
func TestPromotionKeepsCount(t *testing.T) {
	cs := coordinators(t, 1)
	cache := filepath.Join(t.TempDir(), "rules-cache.json")
	const limit = 40
	putRules(t, cs[0].GRPCAddr(), rule("abuse", rules.Tenant, algo.FixedWindow, limit, time.Hour, lease.Abuse))
	first := newAgent(t, "gw-1", addrs(cs), func(c *Config) { c.RulesCacheFile = cache })
	testwait.For(t, 10*time.Second, "the cache written", func() bool { _, err := os.Stat(cache); return err == nil })
	if err := first.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	a, err := New(Config{Coordinators: []string{deadCoordinator}, NodeID: "gw-1", Region: "eu-west", ReportInterval: testInterval,
		RulesCacheFile: cache, Logger: (&logBuffer{}).logger(), CloseTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	for i := range 50 {
		req := Request{Tenant: fmt.Sprintf("tenant-%d", i)}
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range 2 * limit {
					if a.Check(req).Allowed {
						admitted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if n := admitted.Load(); n > limit {
			t.Fatalf("%s: %d admitted in one window of a limit of %d", req.Tenant, n, limit)
		}
	}
}
