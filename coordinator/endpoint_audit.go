package coordinator

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/allot-io/allot/coordinator/internal/authz"
	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/allot-io/allot/internal/auth"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// The audit log (docs/operations.md#audit-log) records each change an
// admin call makes in the Raft entry that makes it: a handler stamps the
// command it proposes with auditStamp, on the leader, and the state adds
// what changed as it applies it. What no command carries is recorded with
// recordAudit, one call from any handler.

// The metadata a member forwarding a call to the leader names its caller
// in: the leader believes them only from a member's certificate, since
// the forwarding member's certificate, not the caller's, is what the
// leader sees of a call whose caller proved itself by certificate.
const (
	callerActorKey = "allot-audit-actor"
	callerPeerKey  = "allot-audit-peer"
)

// anonymous is the actor of every call to a coordinator without
// credentials: nothing identifies the caller but its address.
const anonymous = "anonymous"

// caller names the caller of a call, for the audit log: the credential
// it proved and its address. A member's certificate may name another
// caller (a call it forwarded); anyone else's naming is ignored.
func (c *Coordinator) caller(ctx context.Context) (actor, addr string) {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		addr = p.Addr.String()
	}
	md, _ := metadata.FromIncomingContext(ctx)
	fwdActor, fwdPeer := firstValue(md, callerActorKey), firstValue(md, callerPeerKey)
	if !c.authz.Enabled() {
		// Nobody proves anything here: a forwarder's word is kept as an
		// address only, next to the one the call came from.
		if fwdPeer != "" {
			addr = fwdPeer + " via " + addr
		}
		return anonymous, addr
	}
	id := authz.Identity(ctx)
	if fwdActor != "" && id.Holds(auth.Member) {
		if fwdPeer != "" {
			addr = fwdPeer + " via " + addr
		}
		return fwdActor, addr
	}
	return id.Name(), addr
}

func firstValue(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// forwardCaller names the caller of ctx's call in the outgoing metadata
// of out, a call forwarded to the leader.
func (c *Coordinator) forwardCaller(ctx, out context.Context) context.Context {
	actor, addr := c.caller(ctx)
	return metadata.AppendToOutgoingContext(out, callerActorKey, actor, callerPeerKey, addr)
}

// auditStamp is the stamp of a change the caller of ctx asks for, on this
// (the leader's) clock, for the command that makes it.
func (c *Coordinator) auditStamp(ctx context.Context, action string) *fsmpb.Audit {
	actor, addr := c.caller(ctx)
	return &fsmpb.Audit{AtUnixNano: c.now().UnixNano(), Actor: actor, Peer: addr, Action: action, MaxEntries: uint64(c.cfg.AuditMaxEntries)}
}

// selfStamp is the stamp of a change this member makes of itself (a
// rules file loaded as it leads).
func (c *Coordinator) selfStamp(action string) *fsmpb.Audit {
	return &fsmpb.Audit{AtUnixNano: c.now().UnixNano(), Actor: "coordinator " + c.cfg.NodeID, Action: action, MaxEntries: uint64(c.cfg.AuditMaxEntries)}
}

// recordAudit records a change that no replicated command carries, or
// whose command the state cannot describe: kind (state.AuditKinds),
// what it changed and its values before and after. It runs on the
// leader (in onLeader's local function, as the change does); the entry
// is its own Raft entry, so record the change first and this after it.
func (c *Coordinator) recordAudit(ctx context.Context, kind, action string, subjects []string, before, after *allotpb.AuditValues) error {
	if !slices.Contains(state.AuditKinds, kind) {
		return fmt.Errorf("coordinator: audit kind %q: want one of %v", kind, state.AuditKinds)
	}
	cmd := &fsmpb.AuditCommand{Audit: c.auditStamp(ctx, action), Kind: kind, Subjects: subjects, Before: before, After: after}
	_, err := c.apply(ctx, state.CmdAudit|state.Ignorable, cmd, 10*time.Second)
	return err
}

type auditServer struct {
	allotpb.UnimplementedAuditServiceServer
	c *Coordinator
}

// maxAuditPage bounds a ListAudit page; maxAuditScan the entries one page
// looks at, so that a filter matching little answers in bounded time
// (with a token to go on from).
const (
	defaultAuditPage = 100
	maxAuditPage     = 1000
	maxAuditScan     = 100_000
)

// ListAudit reads this member's replica of the audit log, newest first.
func (s *auditServer) ListAudit(_ context.Context, req *allotpb.ListAuditRequest) (*allotpb.ListAuditResponse, error) {
	q := state.AuditQuery{Actor: req.GetActor(), Kind: req.GetKind(), Subject: req.GetSubject()}
	if q.Kind != "" && !slices.Contains(state.AuditKinds, q.Kind) {
		return nil, invalid("kind", fmt.Sprintf("%q is not a kind; want one of %v", q.Kind, state.AuditKinds))
	}
	if f := req.GetFrom(); f != nil {
		if err := f.CheckValid(); err != nil {
			return nil, invalid("from", err.Error())
		}
		q.From = f.AsTime().UnixNano()
	}
	if to := req.GetTo(); to != nil {
		if err := to.CheckValid(); err != nil {
			return nil, invalid("to", err.Error())
		}
		q.To = to.AsTime().UnixNano()
	}
	size := int(req.GetPageSize())
	switch {
	case size == 0:
		size = defaultAuditPage
	case size > maxAuditPage:
		return nil, invalid("page_size", fmt.Sprintf("at most %d", maxAuditPage))
	}
	var before uint64
	if tok := req.GetPageToken(); tok != "" {
		var err error
		if before, err = decodeAuditToken(tok); err != nil {
			return nil, invalid("page_token", err.Error())
		}
	}
	out := &allotpb.ListAuditResponse{}
	s.c.fsm.Read(func(st *state.State) {
		entries, next, more := st.AuditPage(q, before, size, maxAuditScan)
		out.Entries = entries
		if more {
			out.NextPageToken = encodeAuditToken(next)
		}
		out.OldestSeq, out.NewestSeq = st.AuditBounds()
	})
	return out, nil
}

func encodeAuditToken(before uint64) string {
	return base64.RawURLEncoding.EncodeToString([]byte("audit:" + strconv.FormatUint(before, 10)))
}

func decodeAuditToken(tok string) (uint64, error) {
	bad := errors.New("not a token a previous page gave")
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || len(b) < 7 || string(b[:6]) != "audit:" {
		return 0, bad
	}
	v, err := strconv.ParseUint(string(b[6:]), 10, 64)
	if err != nil || v == 0 {
		return 0, bad
	}
	return v, nil
}
