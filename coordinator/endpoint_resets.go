package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/allot-io/allot/internal/shard"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// maxResetsPage bounds a ListResets answer.
const maxResetsPage = 10_000

type resetsServer struct {
	allotpb.UnimplementedResetsServiceServer
	c *Coordinator
}

// ResetKeys records a reset on the home group's leader, validated and
// checked against what the leader knows of the key, and drops the
// leader's lease pools of the key so that the next lease is divided
// afresh. Agents act on it in the answer to their next report.
func (s *resetsServer) ResetKeys(ctx context.Context, req *allotpb.ResetKeysRequest) (*allotpb.ResetKeysResponse, error) {
	c := s.c
	if !c.isHome() {
		return nil, c.notHome("ResetKeys")
	}
	if req.GetTarget() == nil {
		c.metrics.adminRequests.WithLabelValues("ResetKeys", "invalid").Inc()
		return nil, badRequest("target: none given", &errdetails.BadRequest_FieldViolation{Field: "target", Description: "none given"})
	}
	in := proto.Clone(req.GetTarget()).(*allotpb.Reset)
	in.Key, in.Version, in.AtUnixNano, in.By = "", 0, 0, "" // the coordinators' to set
	out, err := onLeader(ctx, c, func() (*allotpb.ResetKeysResponse, error) {
		// Who asked, as the leader identified the call (a forwarded
		// call carries the caller's token).
		in.By, _ = c.caller(ctx)
		if err := c.checkReset(in); err != nil {
			return nil, err
		}
		res, err := c.apply(ctx, state.CmdReset, &fsmpb.ResetCommand{Entry: in, NowUnixNano: c.now().UnixNano()}, 10*time.Second)
		if err != nil {
			if errors.Is(err, ErrNotLeader) {
				return nil, err
			}
			return nil, resetError(err)
		}
		rec := res.(*allotpb.Reset)
		n := c.alloc.ResetPools(rec, true)
		// The reset is kept with who and when; the audit log records it
		// among the other changes, in an entry of its own.
		if err := c.recordAudit(ctx, "reset", "ResetKeys", []string{resetSubject(rec)}, nil, &allotpb.AuditValues{Resets: []*allotpb.Reset{rec}}); err != nil {
			c.log.Warn("the reset is done, but not in the audit log", "error", err)
		}
		c.log.Info("key reset", "rule", rec.GetRule(), "tenant", rec.GetTenant(), "key", rec.GetKey(), "all_keys", rec.GetAllKeys(),
			"by", rec.GetBy(), "version", rec.GetVersion(), "pools", n)
		return &allotpb.ResetKeysResponse{Recorded: rec, Pools: uint32(n)}, nil
	}, func(ctx context.Context, addr string) (*allotpb.ResetKeysResponse, error) {
		return allotpb.NewResetsServiceClient(c.peers.conn(addr)).ResetKeys(ctx, req)
	})
	if code := status.Code(err); code == codes.InvalidArgument || code == codes.NotFound {
		c.metrics.adminRequests.WithLabelValues("ResetKeys", "invalid").Inc()
		return nil, err
	}
	c.metrics.adminRequests.WithLabelValues("ResetKeys", resultLabel(err)).Inc()
	return out, grpcError(err)
}

// checkReset validates a reset against the leader's rule set and refuses
// one of a key the cluster has never seen: no usage of the tenant under
// the rule in the ledger's windows, and no lease pool for the key here.
// Keys without a tenant (an ip rule's, a global rule's) are not checked:
// the ledger counts by tenant. Nor are tenants whose slot another shard
// group owns: their usage and pools are there.
func (c *Coordinator) checkReset(in *allotpb.Reset) error {
	var (
		rec    *allotpb.Reset
		err    error
		seen   bool
		remote bool
	)
	c.fsm.Read(func(st *state.State) {
		if rec, err = st.CheckReset(in); err != nil || rec.GetTenant() == "" {
			return
		}
		remote = !st.Owns(shard.Of(rec.GetTenant()))
		seen = st.HasUsage(rec.GetTenant(), rec.GetRule())
	})
	if err != nil {
		return resetError(err)
	}
	if rec.GetTenant() == "" || remote || seen || c.alloc.ResetPools(rec, false) > 0 {
		return nil
	}
	what := fmt.Sprintf("tenant %q has no usage under rule %q in the ledger and no lease pool", rec.GetTenant(), rec.GetRule())
	if !rec.GetAllKeys() {
		what = fmt.Sprintf("key %s of rule %q: %s", resetSubject(rec), rec.GetRule(), what)
	}
	return status.Error(codes.NotFound, fmt.Errorf("%w: %s", state.ErrResetKeyNotFound, what).Error())
}

// resetError turns validation errors into INVALID_ARGUMENT with one
// field violation per problem.
func resetError(err error) error {
	var es rules.Errors
	if !errors.As(err, &es) {
		return err
	}
	vs := make([]*errdetails.BadRequest_FieldViolation, len(es))
	for i, e := range es {
		vs[i] = &errdetails.BadRequest_FieldViolation{Field: "target." + e.Field, Description: e.Msg}
	}
	return badRequest(err.Error(), vs...)
}

// resetSubject names what a reset resets, for logs and the audit log.
func resetSubject(r *allotpb.Reset) string {
	var parts []string
	for _, kv := range [][2]string{{"tenant", r.GetTenant()}, {"user", r.GetUser()}, {"route", r.GetRoute()}, {"ip", r.GetIp()}} {
		if kv[1] != "" {
			parts = append(parts, kv[0]+"="+kv[1])
		}
	}
	if r.GetAllKeys() {
		parts = append(parts, "all keys")
	}
	return r.GetRule() + "{" + strings.Join(parts, ",") + "}"
}

// ListResets answers from this member's replica.
func (s *resetsServer) ListResets(_ context.Context, req *allotpb.ListResetsRequest) (*allotpb.ResetsDelta, error) {
	limit := int(req.GetLimit())
	switch {
	case limit == 0:
		limit = 1000
	case limit > maxResetsPage:
		return nil, badRequest(fmt.Sprintf("limit: at most %d, got %d", maxResetsPage, limit),
			&errdetails.BadRequest_FieldViolation{Field: "limit", Description: fmt.Sprintf("at most %d", maxResetsPage)})
	}
	out := &allotpb.ResetsDelta{}
	s.c.fsm.Read(func(st *state.State) {
		out.Version = st.ResetsVersion()
		if req.GetRule() == "" && req.GetTenant() == "" {
			if d := st.ResetsSince(req.GetSince(), limit, false); d != nil {
				out = d
			}
			return
		}
		st.ListResets(req.GetSince(), req.GetRule(), req.GetTenant(), func(r *allotpb.Reset) bool {
			if len(out.Resets) == limit {
				out.More, out.Version = true, out.Resets[limit-1].GetVersion()
				return false
			}
			out.Resets = append(out.Resets, r)
			return true
		})
	})
	return out, nil
}

// mirrorResets takes in the home group's resets made since this group
// last did, a page per call, and forgets what was spent in this group's
// pools of their keys: a tenant's pools are in the group that owns its
// slot. Only the leader's proposals take effect.
func (c *Coordinator) mirrorResets(ctx context.Context) error {
	var lastErr error
	for _, a := range c.cfg.ShardHome {
		for {
			var have uint64
			c.fsm.Read(func(st *state.State) { have = st.MirroredResetsVersion() })
			rctx, cancel := context.WithTimeout(withToken(ctx, c.joinToken()), 10*time.Second)
			d, err := allotpb.NewResetsServiceClient(c.peers.conn(a)).ListResets(rctx, &allotpb.ListResetsRequest{Since: have, Limit: maxResetsPage})
			cancel()
			if err != nil {
				lastErr = err
				break
			}
			if d.GetVersion() <= have {
				return nil
			}
			cmd := &fsmpb.ResetCommand{Mirror: true, Mirrored: d.GetResets(), MirrorVersion: d.GetVersion(), NowUnixNano: c.now().UnixNano()}
			if _, err := c.apply(ctx, state.CmdReset, cmd, 10*time.Second); err != nil {
				return fmt.Errorf("mirroring the home group's resets: %w", err)
			}
			for _, r := range d.GetResets() {
				c.alloc.ResetPools(r, true)
			}
			c.log.Info("resets mirrored from the home group", "version", d.GetVersion(), "resets", len(d.GetResets()))
			if !d.GetMore() {
				return nil
			}
		}
	}
	return lastErr
}
