package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/internal/testwait"
	"github.com/allot-io/allot/lease"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

func overridesClient(t *testing.T, addr string) allotpb.OverridesServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return allotpb.NewOverridesServiceClient(cc)
}

// limitOf is the limit a check of tenant under rule is decided by, read
// with a check of cost 1 on a fresh user key.
func limitOf(a *Agent, tenant string) int64 {
	return a.Check(Request{Tenant: tenant, User: "probe"}).Limit
}

// TestOverridesReachAgents: an override put through the API (on a
// follower, which forwards it) changes the tenant's limit on a running
// agent within a few report intervals, with no rule set sent; deleting
// it and its expiry restore the rule's limit. The coordinators lease the
// overridden limit, and the quota is never exceeded.
func TestOverridesReachAgents(t *testing.T) {
	cs := coordinators(t, 3)
	quota := rule("plan-quota", rules.Tenant, algo.FixedWindow, 10, time.Hour, lease.Quota)
	probe := rule("per-user", rules.User, algo.FixedWindow, 1_000_000, time.Hour, lease.Capacity)
	putRules(t, cs[0].GRPCAddr(), quota, probe)
	a := newAgent(t, "gw-1", addrs(cs), nil)
	rulesVersion := a.Rules().Version()
	var follower string
	for _, c := range cs {
		if st := c.Status(); st.GetLeaderGrpcAddress() != c.GRPCAddr() {
			follower = c.GRPCAddr()
		}
	}
	oc := overridesClient(t, follower)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	put := time.Now()
	if _, err := oc.PutOverrides(ctx, &allotpb.PutOverridesRequest{Overrides: []*allotpb.Override{{Rule: "plan-quota", Tenant: "acme", Limit: 50}}}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "the agent to enforce acme's override", func() bool {
		c := a.rules.Load()
		for _, rs := range c.rules {
			if rs.rule.Name == "plan-quota" {
				return rs.overrides.get("acme") != nil
			}
		}
		return false
	})
	t.Logf("override reached the agent %v after the put returned (report interval %v)", time.Since(put).Round(time.Millisecond), testInterval)
	if a.Rules().Version() != rulesVersion {
		t.Errorf("an override changed the rule set's version %d → %d", rulesVersion, a.Rules().Version())
	}
	admitted := 0
	for i := 0; i < 200; i++ {
		d := a.Check(Request{Tenant: "acme"})
		if d.Allowed {
			admitted++
		} else if d.Limit != 50 {
			t.Fatalf("acme refused under limit %d, want the override's 50", d.Limit)
		}
	}
	if admitted > 50 || admitted < 40 {
		t.Errorf("acme admitted %d under an override of 50 per hour", admitted)
	}
	if n := admittedOf(a, "globex", 30); n != 10 {
		t.Errorf("globex, not overridden, admitted %d of the rule's 10", n)
	}

	if _, err := oc.DeleteOverrides(ctx, &allotpb.DeleteOverridesRequest{Keys: []*allotpb.OverrideKey{{Rule: "plan-quota", Tenant: "acme"}}}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "the deletion to reach the agent", func() bool { return limitOf(a, "acme") == 10 })

	// A temporary raise ends at its expiry, on the agent and in the API.
	until := time.Now().Add(1500 * time.Millisecond)
	if _, err := oc.PutOverrides(ctx, &allotpb.PutOverridesRequest{Overrides: []*allotpb.Override{{Rule: "plan-quota", Tenant: "event", Limit: 500, ExpiresUnixNano: until.UnixNano()}}}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "the raise to apply", func() bool { return limitOf(a, "event") == 500 })
	testwait.For(t, 20*time.Second, "the raise to expire", func() bool { return limitOf(a, "event") == 10 })
	// The agent expires it on its estimate of the coordinators' clock,
	// within a few milliseconds of this one.
	if early := time.Until(until); early > 50*time.Millisecond {
		t.Fatalf("the raise ended %v before its expiry", early)
	}
}

func admittedOf(a *Agent, tenant string, n int) int {
	admitted := 0
	for i := 0; i < n; i++ {
		if a.Check(Request{Tenant: tenant}).Allowed {
			admitted++
		}
	}
	return admitted
}

// TestOverridesRefuseBadInput: each bad call is refused with the field it
// names, and nothing changes.
func TestOverridesRefuseBadInput(t *testing.T) {
	cs := coordinators(t, 1)
	putRules(t, cs[0].GRPCAddr(), rule("plan-quota", rules.Tenant, algo.GCRA, 10, time.Second, lease.Quota))
	oc := overridesClient(t, cs[0].GRPCAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := oc.PutOverrides(ctx, &allotpb.PutOverridesRequest{Overrides: []*allotpb.Override{{Rule: "plan-quota", Tenant: "keep", Limit: 20}}}); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Minute).UnixNano()
	for _, tc := range []struct {
		name  string
		call  func() error
		code  codes.Code
		field string
	}{
		{"unknown rule", func() error {
			_, err := oc.PutOverrides(ctx, &allotpb.PutOverridesRequest{Overrides: []*allotpb.Override{{Rule: "nope", Tenant: "a", Limit: 1}}})
			return err
		}, codes.InvalidArgument, "overrides[0].rule"},
		{"negative limit", func() error {
			_, err := oc.PutOverrides(ctx, &allotpb.PutOverridesRequest{Overrides: []*allotpb.Override{{Rule: "plan-quota", Tenant: "a", Limit: 3}, {Rule: "plan-quota", Tenant: "b", Limit: -1}}})
			return err
		}, codes.InvalidArgument, "overrides[1].limit"},
		{"expiry in the past", func() error {
			_, err := oc.PutOverrides(ctx, &allotpb.PutOverridesRequest{Overrides: []*allotpb.Override{{Rule: "plan-quota", Tenant: "a", Limit: 3, ExpiresUnixNano: past}}})
			return err
		}, codes.InvalidArgument, "overrides[0].expires"},
		{"none", func() error {
			_, err := oc.PutOverrides(ctx, &allotpb.PutOverridesRequest{})
			return err
		}, codes.InvalidArgument, "overrides"},
		{"delete of none", func() error {
			_, err := oc.DeleteOverrides(ctx, &allotpb.DeleteOverridesRequest{Keys: []*allotpb.OverrideKey{{Rule: "plan-quota", Tenant: "keep"}, {Rule: "plan-quota", Tenant: "ghost"}}})
			return err
		}, codes.NotFound, ""},
		{"bad page token", func() error {
			_, err := oc.ListOverrides(ctx, &allotpb.ListOverridesRequest{PageToken: "%%%"})
			return err
		}, codes.InvalidArgument, "page_token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			st, _ := status.FromError(err)
			if st.Code() != tc.code {
				t.Fatalf("got %v, want %v", err, tc.code)
			}
			if tc.field != "" && !hasViolation(st, tc.field) {
				t.Fatalf("%v names no field %s", err, tc.field)
			}
			list, err := oc.ListOverrides(ctx, &allotpb.ListOverridesRequest{})
			if err != nil || list.GetTotal() != 1 || list.GetOverrides()[0].GetLimit() != 20 {
				t.Fatalf("after a refused call: %v, %v; want keep's override alone", list, err)
			}
		})
	}
}

func hasViolation(st *status.Status, field string) bool {
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				if v.GetField() == field {
					return true
				}
			}
		}
	}
	return false
}

// TestOverridesListPages: list pages by rule and tenant prefix.
func TestOverridesListPages(t *testing.T) {
	cs := coordinators(t, 1)
	putRules(t, cs[0].GRPCAddr(), rule("plan-quota", rules.Tenant, algo.GCRA, 10, time.Second, lease.Quota))
	oc := overridesClient(t, cs[0].GRPCAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var os []*allotpb.Override
	for i := range 250 {
		os = append(os, &allotpb.Override{Rule: "plan-quota", Tenant: fmt.Sprintf("t%03d", i), Limit: int64(i + 1)})
	}
	if _, err := oc.PutOverrides(ctx, &allotpb.PutOverridesRequest{Overrides: os}); err != nil {
		t.Fatal(err)
	}
	var got []string
	tok := ""
	for {
		page, err := oc.ListOverrides(ctx, &allotpb.ListOverridesRequest{Rule: "plan-quota", TenantPrefix: "t1", PageSize: 30, PageToken: tok})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.GetOverrides() {
			got = append(got, o.GetTenant())
		}
		if tok = page.GetNextPageToken(); tok == "" {
			break
		}
	}
	if len(got) != 100 || got[0] != "t100" || got[99] != "t199" || !strings.HasPrefix(got[50], "t1") {
		t.Fatalf("listed %d tenants with prefix t1 (%v…), want t100..t199", len(got), got[:min(3, len(got))])
	}
	o, err := oc.GetOverride(ctx, &allotpb.GetOverrideRequest{Rule: "plan-quota", Tenant: "t042"})
	if err != nil || o.GetLimit() != 43 {
		t.Fatalf("get: %v, %v", o, err)
	}
}
