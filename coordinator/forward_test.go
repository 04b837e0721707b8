package coordinator

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/allot-io/allot/internal/testwait"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/types/known/durationpb"
)

// applyGate holds members' replicas behind their logs: a member held
// applies nothing until released, while its Raft goes on taking entries.
type applyGate struct {
	mu   sync.Mutex
	held map[string]chan struct{}
}

func newApplyGate() *applyGate { return &applyGate{held: map[string]chan struct{}{}} }

// install sets the gate's hook on a member's configuration.
func (g *applyGate) install(cfg *Config) {
	id := cfg.NodeID
	cfg.hooks = &testHooks{beforeApply: func(*raft.Log) {
		g.mu.Lock()
		ch := g.held[id]
		g.mu.Unlock()
		if ch != nil {
			<-ch
		}
	}}
}

// hold stops a member applying entries; it returns what releases it,
// which the test's cleanup also calls (a member stuck in Apply cannot
// shut down).
func (g *applyGate) hold(t *testing.T, id string) (release func()) {
	g.mu.Lock()
	ch := make(chan struct{})
	g.held[id] = ch
	g.mu.Unlock()
	var once sync.Once
	release = func() {
		once.Do(func() {
			g.mu.Lock()
			delete(g.held, id)
			g.mu.Unlock()
			close(ch)
		})
	}
	t.Cleanup(release)
	return release
}

// TestWritesOnLaggingFollower: a write sent to a follower right after a
// write through the leader that it depends on succeeds, though the
// follower's replica has not applied the first write: every admin write
// is forwarded before anything is checked against the replicated state,
// and checked on the leader. Each write here was refused by a follower
// checking its own replica (NotFound, InvalidArgument) when it read the
// state before forwarding.
func TestWritesOnLaggingFollower(t *testing.T) {
	gate := newApplyGate()
	nodes := cluster(t, 3, gate.install)
	l := waitLeader(t, nodes)
	var f *Coordinator
	for _, c := range nodes {
		if c != l {
			f = c
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	onLeader := allotpb.NewRulesServiceClient(dial(t, l.GRPCAddr()))
	fconn := dial(t, f.GRPCAddr())
	rulesOn := allotpb.NewRulesServiceClient(fconn)
	overridesOn := allotpb.NewOverridesServiceClient(fconn)

	api := &allotpb.Rule{Name: "api-user", Scope: "descriptor", Algorithm: "token_bucket", Limit: 100, Period: durationpb.New(time.Second), Intent: "abuse",
		Match: &allotpb.Match{Domain: "api", Descriptors: []*allotpb.DescriptorEntry{{Key: "user"}}}}
	apiVIP := &allotpb.Rule{Name: "api-user-vip", Scope: "descriptor", Algorithm: "token_bucket", Limit: 1000, Period: durationpb.New(time.Second), Intent: "abuse",
		Match:    &allotpb.Match{Domain: "api", Descriptors: []*allotpb.DescriptorEntry{{Key: "user"}, {Key: "tier", Value: "vip"}}},
		Replaces: []string{"api-user"}}

	release := gate.hold(t, f.ID())
	if _, err := onLeader.PutRules(ctx, &allotpb.PutRulesRequest{Rules: []*allotpb.Rule{quotaRule, api}}); err != nil {
		t.Fatal(err)
	}
	lagging := func() bool {
		has := false
		f.fsm.Read(func(st *state.State) { _, has = st.Rules().Get(quotaRule.GetName()) })
		return !has
	}
	if !lagging() {
		t.Fatal("the follower applied the rules while held")
	}
	for _, w := range []struct {
		name string
		call func() error
	}{
		{"PutRules of a rule replacing one just put", func() error {
			_, err := rulesOn.PutRules(ctx, &allotpb.PutRulesRequest{Rules: []*allotpb.Rule{apiVIP}})
			return err
		}},
		{"PutOverrides under a rule just put", func() error {
			_, err := overridesOn.PutOverrides(ctx, &allotpb.PutOverridesRequest{Overrides: []*allotpb.Override{{Rule: quotaRule.GetName(), Tenant: "acme", Limit: 5000}}})
			return err
		}},
		{"DeleteOverrides of an override just put", func() error {
			_, err := overridesOn.DeleteOverrides(ctx, &allotpb.DeleteOverridesRequest{Keys: []*allotpb.OverrideKey{{Rule: quotaRule.GetName(), Tenant: "acme"}}})
			return err
		}},
		{"DeleteRule of a rule just put", func() error {
			_, err := rulesOn.DeleteRule(ctx, &allotpb.DeleteRuleRequest{Name: quotaRule.GetName()})
			return err
		}},
	} {
		if err := w.call(); err != nil {
			t.Errorf("%s, on a follower that has not applied it: %v", w.name, err)
		}
	}
	if !lagging() {
		t.Fatal("the follower applied the rules while held: the writes above proved nothing")
	}
	release()
	testwait.For(t, 10*time.Second, "the follower to catch up", func() bool {
		var got []string
		f.fsm.Read(func(st *state.State) {
			for _, r := range st.Rules().Rules() {
				got = append(got, r.Name)
			}
		})
		return len(got) == 2 && got[0] == "api-user" && got[1] == "api-user-vip"
	})
}
