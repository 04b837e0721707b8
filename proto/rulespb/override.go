package rulespb

import (
	"time"

	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
)

// OverrideToProto converts o to its wire form (version and deleted unset).
func OverrideToProto(o *rules.Override) *allotpb.Override {
	p := &allotpb.Override{Rule: o.Rule, Tenant: o.Tenant, Limit: o.Limit, Weight: o.Weight, Cycle: AnchorToProto(o.Cycle)}
	if !o.Expires.IsZero() {
		p.ExpiresUnixNano = o.Expires.UnixNano()
	}
	return p
}

// OverrideFromProto converts an override's wire form; it is validated by
// rules.Set.CheckOverride, not here.
func OverrideFromProto(p *allotpb.Override) rules.Override {
	o := rules.Override{Rule: p.GetRule(), Tenant: p.GetTenant(),
		TenantOverride: rules.TenantOverride{Limit: p.GetLimit(), Weight: p.GetWeight(), Cycle: AnchorFromProto(p.GetCycle())}}
	if ns := p.GetExpiresUnixNano(); ns != 0 {
		o.Expires = time.Unix(0, ns)
	}
	return o
}

// AnchorToProto converts a plan's or a tenant's anchor; nil for none.
func AnchorToProto(a rules.Anchor) *allotpb.Anchor {
	if a.IsZero() {
		return nil
	}
	return &allotpb.Anchor{AnchorDay: int32(a.AnchorDay), TimeZone: a.TimeZone}
}

// AnchorFromProto converts an anchor's wire form.
func AnchorFromProto(p *allotpb.Anchor) rules.Anchor {
	return rules.Anchor{AnchorDay: int(p.GetAnchorDay()), TimeZone: p.GetTimeZone()}
}
