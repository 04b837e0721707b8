package rulespb

import (
	"fmt"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ToProto converts r to its wire form.
func ToProto(r *rules.Rule) *allotpb.Rule {
	p := &allotpb.Rule{
		Name:        r.Name,
		Description: r.Description,
		Limit:       r.Limit,
		Period:      durationpb.New(r.Period),
		Burst:       r.Burst,
		Tolerance:   r.Tolerance,
		Local:       r.Local,
		Match:       &allotpb.Match{Routes: r.Match.Routes, Tenants: r.Match.Tenants, Plans: r.Match.Plans, Domain: r.Match.Domain},
		Regions:     r.Regions,
		Shadow:      r.Shadow,
		Unlimited:   r.Unlimited,
		Replaces:    r.Replaces,
		Notices:     r.Notices,
	}
	for _, e := range r.Match.Descriptors {
		p.Match.Descriptors = append(p.Match.Descriptors, &allotpb.DescriptorEntry{Key: e.Key, Value: e.Value})
	}
	if o := r.Overage; o != nil {
		p.Overage = &allotpb.Overage{UpTo: o.UpTo}
	}
	if c := r.Cycle; c != nil {
		p.Cycle = &allotpb.Cycle{AnchorDay: int32(c.AnchorDay), TimeZone: c.TimeZone}
		if c.Unit != 0 {
			p.Cycle.Unit = c.Unit.String()
		}
	}
	// MarshalText refuses a scope that is none of the six: it is left out,
	// as the zero scope is.
	if s, err := r.Scope.MarshalText(); err == nil {
		p.Scope = string(s)
	}
	if r.Algorithm != 0 {
		p.Algorithm = r.Algorithm.String()
	}
	if r.Intent != 0 {
		p.Intent = r.Intent.String()
	}
	if r.FailMode != 0 {
		p.FailMode = r.FailMode.String()
	}
	for _, a := range r.Key {
		p.Key = append(p.Key, string(a))
	}
	if len(r.Plans) > 0 {
		p.Plans = make(map[string]*allotpb.Plan, len(r.Plans))
		for name, pl := range r.Plans {
			p.Plans[name] = &allotpb.Plan{Limit: pl.Limit, Weight: pl.Weight, Rank: uint32(pl.Rank), Cycle: AnchorToProto(pl.Cycle)}
		}
	}
	if len(r.Tenants) > 0 {
		p.Tenants = make(map[string]*allotpb.TenantOverride, len(r.Tenants))
		for name, o := range r.Tenants {
			p.Tenants[name] = &allotpb.TenantOverride{Limit: o.Limit, Weight: o.Weight, Cycle: AnchorToProto(o.Cycle)}
		}
	}
	return p
}

// FromProto converts a wire rule and validates it. Errors are a
// rules.Errors list, each naming the rule and the field.
func FromProto(p *allotpb.Rule) (rules.Rule, error) {
	r := rules.Rule{
		Name:        p.GetName(),
		Description: p.GetDescription(),
		Limit:       p.GetLimit(),
		Burst:       p.GetBurst(),
		Tolerance:   p.Tolerance,
		Local:       p.GetLocal(),
		Regions:     p.GetRegions(),
		Match:       rules.Match{Routes: p.GetMatch().GetRoutes(), Tenants: p.GetMatch().GetTenants(), Plans: p.GetMatch().GetPlans(), Domain: p.GetMatch().GetDomain()},
		Shadow:      p.GetShadow(),
		Unlimited:   p.GetUnlimited(),
		Replaces:    p.GetReplaces(),
		Notices:     p.GetNotices(),
	}
	for _, e := range p.GetMatch().GetDescriptors() {
		r.Match.Descriptors = append(r.Match.Descriptors, rules.DescriptorEntry{Key: e.GetKey(), Value: e.GetValue()})
	}
	if o := p.GetOverage(); o != nil {
		r.Overage = &rules.Overage{UpTo: o.GetUpTo()}
	}
	var errs rules.Errors
	bad := func(field string, err error) {
		errs = append(errs, &rules.Error{Rule: r.Name, Field: field, Msg: err.Error()})
	}
	if d := p.GetPeriod(); d != nil {
		if err := d.CheckValid(); err != nil {
			bad("period", err)
		}
		r.Period = d.AsDuration()
	}
	if c := p.GetCycle(); c != nil {
		r.Cycle = &rules.Cycle{Anchor: rules.Anchor{AnchorDay: int(c.GetAnchorDay()), TimeZone: c.GetTimeZone()}}
		if s := c.GetUnit(); s != "" {
			u, err := rules.ParseCalendarUnit(s)
			if err != nil {
				bad("period", err)
			}
			r.Cycle.Unit = u
		}
		r.Cycle.Resolve()
	}
	if s := p.GetScope(); s != "" {
		v, err := rules.ParseScope(s)
		if err != nil {
			bad("scope", err)
		}
		r.Scope = v
	}
	if s := p.GetAlgorithm(); s != "" {
		v, err := algo.ParseAlgorithm(s)
		if err != nil {
			bad("algorithm", fmt.Errorf("unknown algorithm %q", s))
		}
		r.Algorithm = v
	}
	if s := p.GetIntent(); s != "" {
		v, err := lease.ParseIntent(s)
		if err != nil {
			bad("intent", fmt.Errorf("unknown intent %q (want capacity, quota or abuse)", s))
		}
		r.Intent = v
	}
	if s := p.GetFailMode(); s != "" {
		v, err := lease.ParseFailMode(s)
		if err != nil {
			bad("fail_mode", fmt.Errorf("unknown fail mode %q (want fallback, open or closed)", s))
		}
		r.FailMode = v
	}
	for _, a := range p.GetKey() {
		r.Key = append(r.Key, rules.Attr(a))
	}
	if len(p.GetPlans()) > 0 {
		r.Plans = make(map[string]rules.Plan, len(p.GetPlans()))
		for name, pl := range p.GetPlans() {
			if pl.GetRank() > rules.MaxRank {
				bad("plans."+name+".rank", fmt.Errorf("must be at most %d, got %d", rules.MaxRank, pl.GetRank()))
			}
			r.Plans[name] = rules.Plan{Limit: pl.GetLimit(), Weight: pl.GetWeight(), Rank: uint8(min(pl.GetRank(), rules.MaxRank)), Cycle: AnchorFromProto(pl.GetCycle())}
		}
	}
	if len(p.GetTenants()) > 0 {
		r.Tenants = make(map[string]rules.TenantOverride, len(p.GetTenants()))
		for name, o := range p.GetTenants() {
			r.Tenants[name] = rules.TenantOverride{Limit: o.GetLimit(), Weight: o.GetWeight(), Cycle: AnchorFromProto(o.GetCycle())}
		}
	}
	if len(errs) > 0 {
		return r, errs
	}
	if verrs := r.Validate(); len(verrs) > 0 {
		return r, verrs
	}
	return r, nil
}

// SetToProto converts a set to its wire form.
func SetToProto(s *rules.Set) *allotpb.RuleSet {
	out := &allotpb.RuleSet{Version: s.Version()}
	for i := range s.Rules() {
		out.Rules = append(out.Rules, ToProto(&s.Rules()[i]))
	}
	return out
}

// SetFromProto converts and validates a wire rule set. A rule without a
// name is named by its position, #1 for the first.
func SetFromProto(p *allotpb.RuleSet) (*rules.Set, error) {
	rs := make([]rules.Rule, 0, len(p.GetRules()))
	var errs rules.Errors
	for i, pr := range p.GetRules() {
		r, err := FromProto(pr)
		if err != nil {
			if es, ok := err.(rules.Errors); ok {
				for _, e := range es {
					if e.Rule == "" {
						e.Rule = fmt.Sprintf("#%d", i+1)
					}
				}
				errs = append(errs, es...)
			}
			continue
		}
		rs = append(rs, r)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return rules.NewSet(p.GetVersion(), rs)
}
