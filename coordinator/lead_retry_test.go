package coordinator

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	allotpb "github.com/allot-io/allot/proto"
)

// TestLeaderRetriesItsPreamble: a step of a new leader's preamble that
// fails (a barrier or a command timing out) is tried again while the
// member leads, until the leader serves: it never stays Raft's leader
// without serving agents.
func TestLeaderRetriesItsPreamble(t *testing.T) {
	for _, step := range []string{"catch up with the log", "record its addresses", "start an epoch"} {
		t.Run(step, func(t *testing.T) {
			var mu sync.Mutex
			failures := 0
			nodes := cluster(t, 1, func(c *Config) {
				c.hooks = &testHooks{leadStep: func(s string) error {
					mu.Lock()
					defer mu.Unlock()
					if s == step && failures < 2 {
						failures++
						return errors.New("injected: the step timed out")
					}
					return nil
				}}
			})
			c := nodes[0]
			mu.Lock()
			if failures != 2 {
				t.Errorf("the step failed %d times, want 2", failures)
			}
			mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := allotpb.NewAgentServiceClient(dial(t, c.GRPCAddr())).Report(ctx, usageReport("gw-1", "eu-west", 1)); err != nil {
				t.Fatalf("a report to the leader after its preamble failed twice: %v", err)
			}
		})
	}
}
