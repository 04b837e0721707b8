package coordinator

import (
	"context"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/allot-io/allot/internal/tracing"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/proto/rulespb"
	"github.com/allot-io/allot/rules"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

type rulesServer struct {
	allotpb.UnimplementedRulesServiceServer
	c *Coordinator
}

func (s *rulesServer) ListRules(context.Context, *allotpb.ListRulesRequest) (*allotpb.RuleSet, error) {
	var out *allotpb.RuleSet
	s.c.fsm.Read(func(st *state.State) { out = rulespb.SetToProto(st.Rules()) })
	return out, nil
}

func (s *rulesServer) GetRule(_ context.Context, req *allotpb.GetRuleRequest) (*allotpb.Rule, error) {
	var out *allotpb.Rule
	s.c.fsm.Read(func(st *state.State) {
		if r, ok := st.Rules().Get(req.GetName()); ok {
			out = rulespb.ToProto(&r)
		}
	})
	if out == nil {
		return nil, status.Errorf(codes.NotFound, "no rule named %q", req.GetName())
	}
	return out, nil
}

// PutRules validates and applies rules, all or none, on the leader: the
// set they make is checked against the leader's rules, which a
// follower's may lag. A put that would change no rule is not applied:
// the answer is the rule set as it is, its version unchanged.
func (s *rulesServer) PutRules(ctx context.Context, req *allotpb.PutRulesRequest) (*allotpb.RuleSet, error) {
	c := s.c
	if !c.isHome() {
		return nil, c.notHome("PutRules")
	}
	cmd := &fsmpb.RulesCommand{Put: req.GetRules(), ReplaceAll: req.GetReplaceAll()}
	annotate(ctx, attribute.Int("allot.rules", len(cmd.Put)), attribute.Bool("allot.replace_all", cmd.ReplaceAll))
	out, err := onLeader(ctx, c, func() (*allotpb.RuleSet, error) {
		if err := c.checkRulesCommand(cmd); err != nil {
			return nil, err
		}
		// A put that changes nothing (the file put again, or the output
		// of 'rules get' unedited) keeps the version: agents keep every
		// rule's state, and the audit log records no change.
		var same *allotpb.RuleSet
		c.fsm.Read(func(st *state.State) {
			if st.RulesUnchanged(cmd) {
				same = rulespb.SetToProto(st.Rules())
			}
		})
		if same != nil {
			return same, nil
		}
		cmd.Audit = c.auditStamp(ctx, "PutRules")
		return c.applyRulesCommand(ctx, cmd)
	}, func(ctx context.Context, addr string) (*allotpb.RuleSet, error) {
		return c.peers.rules(addr).PutRules(ctx, req)
	})
	if status.Code(err) == codes.InvalidArgument {
		c.metrics.adminRequests.WithLabelValues("PutRules", "invalid").Inc()
		return nil, err
	}
	c.metrics.adminRequests.WithLabelValues("PutRules", resultLabel(err)).Inc()
	return out, grpcError(err)
}

// DeleteRule deletes a rule on the leader: a rule just put through the
// leader may not be on a follower's replica yet.
func (s *rulesServer) DeleteRule(ctx context.Context, req *allotpb.DeleteRuleRequest) (*allotpb.RuleSet, error) {
	c := s.c
	if !c.isHome() {
		return nil, c.notHome("DeleteRule")
	}
	annotate(ctx, tracing.Rule.String(req.GetName()))
	cmd := &fsmpb.RulesCommand{Delete: []string{req.GetName()}}
	out, err := onLeader(ctx, c, func() (*allotpb.RuleSet, error) {
		var found bool
		c.fsm.Read(func(st *state.State) { _, found = st.Rules().Get(req.GetName()) })
		if !found {
			return nil, status.Errorf(codes.NotFound, "no rule named %q", req.GetName())
		}
		cmd.Audit = c.auditStamp(ctx, "DeleteRule")
		return c.applyRulesCommand(ctx, cmd)
	}, func(ctx context.Context, addr string) (*allotpb.RuleSet, error) {
		return c.peers.rules(addr).DeleteRule(ctx, req)
	})
	if status.Code(err) == codes.NotFound {
		c.metrics.adminRequests.WithLabelValues("DeleteRule", "not_found").Inc()
		return nil, err
	}
	c.metrics.adminRequests.WithLabelValues("DeleteRule", resultLabel(err)).Inc()
	return out, grpcError(err)
}

// checkRulesCommand validates the rule set a command would produce, before
// it is proposed.
func (c *Coordinator) checkRulesCommand(cmd *fsmpb.RulesCommand) error {
	var err error
	c.fsm.Read(func(st *state.State) { err = st.CheckRules(cmd) })
	if err != nil {
		return rulesError(err)
	}
	return nil
}

func (c *Coordinator) applyRulesCommand(ctx context.Context, cmd *fsmpb.RulesCommand) (*allotpb.RuleSet, error) {
	res, err := c.apply(ctx, state.CmdRules, cmd, 10*time.Second)
	if err != nil {
		if _, ok := err.(rules.Errors); ok {
			return nil, rulesError(err)
		}
		return nil, err
	}
	return rulespb.SetToProto(res.(*rules.Set)), nil
}
