package coordinator

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/internal/auth"
	"github.com/allot-io/allot/internal/testwait"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// TestAuditThroughFollower: admin calls made on a follower, forwarded to
// the leader, are recorded as their callers' (a token's, a client
// certificate's), never the follower's, with what changed before and
// after; a caller without a member's certificate that names another
// caller is recorded as itself. Every member holds the entries and
// counts them.
func TestAuditThroughFollower(t *testing.T) {
	s := newSecured(t, 3, nil)
	alice, mallory := auth.NewToken(), auth.NewToken()
	s.writeTokens(t, fmt.Sprintf(`tokens:
  - {name: alice, role: admin, token: %q}
  - {name: mallory, role: admin, token: %q}
  - {name: reader, role: reader, token: %q}
  - {name: agent, role: agent, nodes: "gw-*", token: %q}
`, alice, mallory, s.tokens["reader"], s.tokens["agent"]))
	l := waitLeader(t, s.nodes)
	var follower *Coordinator
	for _, c := range s.nodes {
		if c != l {
			follower = c
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fconn := tlsConn(t, follower.GRPCAddr(), s.ca.File, nil)
	rulesOn := allotpb.NewRulesServiceClient(fconn)
	rule := func(limit int64) *allotpb.Rule {
		r := proto.Clone(quotaRule).(*allotpb.Rule)
		r.Limit = limit
		return r
	}
	testwait.For(t, 10*time.Second, "alice's token to be taken", func() bool {
		_, err := rulesOn.PutRules(withToken(ctx, alice), &allotpb.PutRulesRequest{Rules: []*allotpb.Rule{rule(100)}})
		return err == nil
	})
	if _, err := rulesOn.PutRules(withToken(ctx, alice), &allotpb.PutRulesRequest{Rules: []*allotpb.Rule{rule(200)}}); err != nil {
		t.Fatal(err)
	}
	// A client certificate's caller: the leader sees only the follower's
	// certificate, and the follower names the caller.
	ops := s.issue(t, auth.Leaf{File: "ops", Role: auth.Admin, Name: "ops-cert"})
	if _, err := allotpb.NewRulesServiceClient(tlsConn(t, follower.GRPCAddr(), s.ca.File, &ops)).PutRules(ctx, &allotpb.PutRulesRequest{Rules: []*allotpb.Rule{rule(300)}}); err != nil {
		t.Fatal(err)
	}
	// mallory names bob, to the leader directly and through the follower.
	spoof := metadata.AppendToOutgoingContext(withToken(ctx, mallory), callerActorKey, "bob", callerPeerKey, "192.0.2.1:1")
	if _, err := allotpb.NewRulesServiceClient(tlsConn(t, l.GRPCAddr(), s.ca.File, nil)).PutRules(spoof, &allotpb.PutRulesRequest{Rules: []*allotpb.Rule{rule(400)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := rulesOn.DeleteRule(spoof, &allotpb.DeleteRuleRequest{Name: quotaRule.GetName()}); err != nil {
		t.Fatal(err)
	}

	// Each member answers from its replica, newest first.
	want := []struct{ actor, action string }{{"mallory", "DeleteRule"}, {"mallory", "PutRules"}, {"spiffe://allot.test/allot/admin/ops-cert", "PutRules"}, {"alice", "PutRules"}, {"alice", "PutRules"}}
	for _, c := range s.nodes {
		auditOn := allotpb.NewAuditServiceClient(tlsConn(t, c.GRPCAddr(), s.ca.File, nil))
		var got []*allotpb.AuditEntry
		testwait.For(t, 10*time.Second, c.ID()+" to hold the entries", func() bool {
			resp, err := auditOn.ListAudit(withToken(ctx, s.tokens["reader"]), &allotpb.ListAuditRequest{Kind: "rules"})
			if err != nil {
				t.Fatal(err)
			}
			got = resp.GetEntries()
			// The metric counts an entry just after the state holds it.
			return len(got) == len(want) && testutil.ToFloat64(c.metrics.auditEntries.WithLabelValues("rules")) == float64(len(want))
		})
		for i, w := range want {
			if e := got[i]; e.GetActor() != w.actor || e.GetAction() != w.action || e.GetKind() != "rules" {
				t.Errorf("%s: entry %d: %s %s %s, want %+v", c.ID(), i, e.GetActor(), e.GetAction(), e.GetKind(), w)
			}
		}
		second := got[3]
		if b, a := second.GetBefore().GetRules(), second.GetAfter().GetRules(); len(b) != 1 || len(a) != 1 || b[0].GetLimit() != 100 || a[0].GetLimit() != 200 {
			t.Errorf("%s: alice's second put: before %v, after %v; want limit 100, then 200", c.ID(), b, a)
		}
		if !strings.Contains(second.GetPeer(), " via ") {
			t.Errorf("%s: a forwarded call's peer is %q, want the caller's via the follower's", c.ID(), second.GetPeer())
		}
		if del := got[0]; len(del.GetAfter().GetRules()) != 0 || del.GetBefore().GetRules()[0].GetLimit() != 400 {
			t.Errorf("%s: the delete: %v", c.ID(), del)
		}
	}

	// Filters, the reader role, bad input.
	auditOn := allotpb.NewAuditServiceClient(fconn)
	resp, err := auditOn.ListAudit(withToken(ctx, s.tokens["reader"]), &allotpb.ListAuditRequest{Actor: "alice", PageSize: 1})
	if err != nil || len(resp.GetEntries()) != 1 || resp.GetNextPageToken() == "" {
		t.Fatalf("alice's, a page of 1: %v, %v", resp, err)
	}
	resp, err = auditOn.ListAudit(withToken(ctx, s.tokens["reader"]), &allotpb.ListAuditRequest{Actor: "alice", PageSize: 1, PageToken: resp.GetNextPageToken()})
	if err != nil || len(resp.GetEntries()) != 1 || resp.GetEntries()[0].GetAfter().GetRules()[0].GetLimit() != 100 {
		t.Fatalf("alice's second page: %v, %v", resp, err)
	}
	for _, c := range []struct {
		tok  string
		req  *allotpb.ListAuditRequest
		code codes.Code
	}{
		{s.tokens["agent"], &allotpb.ListAuditRequest{}, codes.PermissionDenied},
		{s.tokens["reader"], &allotpb.ListAuditRequest{Kind: "rule"}, codes.InvalidArgument},
		{s.tokens["reader"], &allotpb.ListAuditRequest{PageToken: "nope"}, codes.InvalidArgument},
		{s.tokens["reader"], &allotpb.ListAuditRequest{PageSize: 5000}, codes.InvalidArgument},
	} {
		if _, err := auditOn.ListAudit(withToken(ctx, c.tok), c.req); status.Code(err) != c.code {
			t.Errorf("%v: %v, want %v", c.req, err, c.code)
		}
	}
}

// TestAuditInsecure: without credentials every caller is anonymous,
// known by its address; overrides and membership changes are recorded
// too.
func TestAuditInsecure(t *testing.T) {
	nodes := cluster(t, 3, nil)
	l := waitLeader(t, nodes)
	var follower, victim *Coordinator
	for _, c := range nodes {
		switch {
		case c == l:
		case follower == nil:
			follower = c
		default:
			victim = c
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cc := dial(t, follower.GRPCAddr())
	// Each write goes through the follower to the leader. With 300 ms
	// election timeouts a loaded machine can hold an election between two
	// writes, and a member that knows no leader refuses a write, applying
	// nothing, with "retry shortly": the test retries as a client would.
	write := func(what string, call func() error) {
		t.Helper()
		var err error
		testwait.For(t, 20*time.Second, what+" through the follower", func() bool {
			err = call()
			return status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "no leader elected yet")
		})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	write("PutRules", func() error {
		_, err := allotpb.NewRulesServiceClient(cc).PutRules(ctx, &allotpb.PutRulesRequest{Rules: []*allotpb.Rule{quotaRule}})
		return err
	})
	write("PutOverrides", func() error {
		_, err := allotpb.NewOverridesServiceClient(cc).PutOverrides(ctx, &allotpb.PutOverridesRequest{Overrides: []*allotpb.Override{{Rule: quotaRule.GetName(), Tenant: "acme", Limit: 5}}})
		return err
	})
	write("Remove", func() error {
		_, err := allotpb.NewClusterServiceClient(cc).Remove(ctx, &allotpb.RemoveRequest{Id: victim.ID()})
		return err
	})
	var got []*allotpb.AuditEntry
	testwait.For(t, 10*time.Second, "the follower to hold the entries", func() bool {
		resp, err := allotpb.NewAuditServiceClient(cc).ListAudit(ctx, &allotpb.ListAuditRequest{Actor: anonymous}, grpc.WaitForReady(true))
		if err != nil {
			t.Fatal(err)
		}
		got = resp.GetEntries()
		return len(got) >= 3 && got[0].GetAction() == "Remove"
	})
	// Before them, the members' own joins and promotions as the cluster
	// formed.
	if joins := got[3:]; len(joins) == 0 || joins[len(joins)-1].GetAction() != "Join" {
		t.Errorf("the cluster's formation: %v, want it to start with a join", joins)
	}
	for i, w := range []string{"membership Remove", "overrides PutOverrides", "rules PutRules"} {
		if e := got[i]; e.GetKind()+" "+e.GetAction() != w || !strings.Contains(e.GetPeer(), "127.0.0.1") {
			t.Errorf("entry %d: %v, want %s by anonymous from loopback", i, e, w)
		}
	}
	if rm := got[0]; rm.GetSubjects()[0] != victim.ID() || len(rm.GetBefore().GetMembers()) != 1 {
		t.Errorf("the removal: %v", rm)
	}
	if ov := got[1]; ov.GetSubjects()[0] != quotaRule.GetName()+"/acme" || ov.GetAfter().GetOverrides()[0].GetLimit() != 5 {
		t.Errorf("the override: %v", ov)
	}

	// The hook a handler without a command of its own calls, on the
	// leader: one call records an entry of a known kind.
	if err := l.recordAudit(ctx, "bogus", "ResetUsage", nil, nil, nil); err == nil {
		t.Error("recordAudit took an unknown kind")
	}
	if err := l.recordAudit(ctx, "reset", "ResetUsage", []string{quotaRule.GetName() + "/acme"}, nil, &allotpb.AuditValues{Json: `{"cleared":2}`}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "the follower to hold the reset", func() bool {
		resp, err := allotpb.NewAuditServiceClient(cc).ListAudit(ctx, &allotpb.ListAuditRequest{Kind: "reset", Subject: "acme"})
		return err == nil && len(resp.GetEntries()) == 1 && resp.GetEntries()[0].GetAfter().GetJson() == `{"cleared":2}` && resp.GetEntries()[0].GetActor() == anonymous
	})
}
