package rulespb

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
	"github.com/allot-io/allot/rules/rulestest"
	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"
)

func TestProtoRoundTrip(t *testing.T) {
	rs, err := rules.Load("../../docs/examples/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	set, _ := rules.NewSet(7, rs)
	back, err := SetFromProto(SetToProto(set))
	if err != nil {
		t.Fatal(err)
	}
	if back.Version() != 7 || back.Len() != set.Len() {
		t.Fatalf("version %d, %d rules", back.Version(), back.Len())
	}
	for i, r := range set.Rules() {
		got := back.Rules()[i]
		if ToProto(&got).String() != ToProto(&r).String() {
			t.Errorf("rule %s changed in the round trip:\n%v\n%v", r.Name, ToProto(&r), ToProto(&got))
		}
	}
	bad := ToProto(&set.Rules()[0])
	bad.Algorithm, bad.Intent = "nope", "billing"
	_, err = FromProto(bad)
	var es rules.Errors
	if !errors.As(err, &es) || len(es) != 2 || es[0].Field != "algorithm" || es[1].Field != "intent" {
		t.Errorf("invalid wire rule: %v", err)
	}
}

// TestWireRoundTrip: every valid rule set, sent over the wire as bytes
// and read back, is the same set, field for field.
func TestWireRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		list := rulestest.Rules().Draw(t, "rules")
		set, err := rules.NewSet(rapid.Uint64().Draw(t, "version"), list)
		if err != nil {
			t.Fatalf("the generator drew an invalid set: %v", err)
		}
		b, err := proto.Marshal(SetToProto(set))
		if err != nil {
			t.Fatal(err)
		}
		var wire allotpb.RuleSet
		if err := proto.Unmarshal(b, &wire); err != nil {
			t.Fatal(err)
		}
		back, err := SetFromProto(&wire)
		if err != nil {
			t.Fatalf("a valid set came back invalid: %v", err)
		}
		if back.Version() != set.Version() || back.Len() != set.Len() || (set.Len() > 0 && !reflect.DeepEqual(back.Rules(), set.Rules())) {
			t.Fatalf("read back:\n%+v\nwant:\n%+v", back.Rules(), set.Rules())
		}
	})
}

// TestSetFromProtoNamesPositions: a wire rule without a name is named by
// its position, and every problem of the set is reported.
func TestSetFromProtoNamesPositions(t *testing.T) {
	rs, err := rules.Load("../../docs/examples/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	good := ToProto(&rs[0])
	nameless := ToProto(&rs[1])
	nameless.Name = ""
	badScope := ToProto(&rs[2])
	badScope.Scope = "planet"
	_, err = SetFromProto(&allotpb.RuleSet{Version: 3, Rules: []*allotpb.Rule{good, nameless, badScope}})
	var es rules.Errors
	if !errors.As(err, &es) || !errors.Is(err, rules.ErrInvalid) {
		t.Fatalf("SetFromProto = %v, want rules.Errors", err)
	}
	got := map[string]string{}
	for _, e := range es {
		got[e.Rule] = e.Field
	}
	if got["#2"] != "name" || got[rs[2].Name] != "scope" || len(es) != 2 {
		t.Errorf("errors %v: want #2's name and %s's scope", err, rs[2].Name)
	}
}

// FuzzWire: whatever a rules file accepts survives the wire.
func FuzzWire(f *testing.F) {
	f.Add([]byte("rules:\n  - name: a\n    scope: tenant\n    algorithm: gcra\n    limit: 5\n    period: 1s\n    intent: quota\n"))
	f.Add([]byte("rules: [{name: x, scope: global, algorithm: fixed_window, limit: 1, period: 1h, intent: abuse, plans: {p: {rank: 9, weight: 0.5}}, regions: {eu: 0.6}}]"))
	f.Add([]byte("rules: [{name: d, scope: descriptor, unlimited: true, match: {domain: e, descriptors: [{key: k, value: v*}]}}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, err := rules.Parse("fuzz.yaml", data)
		if err != nil {
			return
		}
		for i := range rs {
			back, err := FromProto(ToProto(&rs[i]))
			if err != nil {
				t.Fatalf("round trip of a parsed rule failed: %v", err)
			}
			if !rules.Equal(&back, &rs[i]) {
				t.Fatalf("rule %s changed on the wire:\n%+v\nwant:\n%+v", rs[i].Name, back, rs[i])
			}
		}
	})
}

// TestDescriptorRulesOnTheWire: descriptor rules, limited and unlimited,
// round-trip through the wire form.
func TestDescriptorRulesOnTheWire(t *testing.T) {
	const ok = `rules:
  - name: per-ip
    scope: descriptor
    match: {domain: edge, descriptors: [{key: remote_address}]}
    algorithm: fixed_window
    limit: 10
    period: 1s
    intent: abuse
    shadow: true
  - name: office
    scope: descriptor
    match: {domain: edge, descriptors: [{key: remote_address, value: 10.0.0.1}]}
    unlimited: true
    replaces: [per-ip]
`
	rs, err := rules.Parse("ok.yaml", []byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	for i := range rs {
		back, err := FromProto(ToProto(&rs[i]))
		if err != nil || !rules.Equal(&back, &rs[i]) {
			t.Errorf("%s did not round-trip: %+v %v", rs[i].Name, back, err)
		}
	}
}

// TestEqualAgreesWithTheWire: two rules are Equal exactly when their wire
// forms are: what the coordinator and agents compare to tell a changed
// rule from an unchanged one did not change when Equal stopped comparing
// wire forms.
func TestEqualAgreesWithTheWire(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := rulestest.Rule("a").Draw(t, "a")
		b, err := FromProto(proto.Clone(ToProto(&a)).(*allotpb.Rule)) // a deep copy
		if err != nil {
			t.Fatal(err)
		}
		mutate(t, &b)
		want := proto.Equal(ToProto(&a), ToProto(&b))
		if got := rules.Equal(&a, &b); got != want {
			t.Fatalf("Equal = %v, the wire forms' proto.Equal = %v:\n%+v\n%+v", got, want, a, b)
		}
		if rules.Equal(&a, &b) != rules.Equal(&b, &a) {
			t.Fatal("Equal is not symmetric")
		}
	})
}

// mutate changes one field of r, or none, or writes a missing list or
// map as an empty one, which changes nothing.
func mutate(t *rapid.T, r *rules.Rule) {
	nan := math.NaN()
	changes := []func(){
		func() {},
		func() { r.Name += "x" },
		func() { r.Description += "x" },
		func() { r.Scope = r.Scope%6 + 1 },
		func() { r.Scope = 0 },
		func() { r.Scope = 42 }, // none of the six: the same as none
		func() { r.Key = append(r.Key, rules.AttrIP) },
		func() {
			if r.Key == nil {
				r.Key = []rules.Attr{}
			}
		},
		func() { r.Algorithm = r.Algorithm%5 + 1 },
		func() { r.Limit++ },
		func() { r.Period++ },
		func() { r.Burst++ },
		func() { r.Intent = r.Intent%3 + 1 },
		func() { r.FailMode = (r.FailMode + 1) % 4 },
		func() {
			if r.Tolerance == nil {
				r.Tolerance = new(float64)
			} else {
				r.Tolerance = nil
			}
		},
		func() {
			if r.Tolerance != nil {
				v := *r.Tolerance + 0.5
				r.Tolerance = &v
			}
		},
		func() { r.Tolerance = &nan },
		func() { r.Match.Routes = append(r.Match.Routes, "/x") },
		func() {
			if r.Match.Routes == nil {
				r.Match.Routes = []string{}
			}
		},
		func() { r.Match.Tenants = append(r.Match.Tenants, "t") },
		func() { r.Match.Plans = append(r.Match.Plans, "p") },
		func() { r.Match.Domain += "x" },
		func() { r.Match.Descriptors = append(r.Match.Descriptors, rules.DescriptorEntry{Key: "k"}) },
		func() {
			if len(r.Match.Descriptors) > 0 {
				r.Match.Descriptors[0].Value += "x"
			}
		},
		func() {
			if r.Plans == nil {
				r.Plans = map[string]rules.Plan{}
			}
		},
		func() {
			for name, p := range r.Plans {
				p.Weight += 1
				r.Plans[name] = p
				break
			}
		},
		func() {
			for name, p := range r.Plans {
				p.Rank = (p.Rank + 1) % (rules.MaxRank + 1)
				r.Plans[name] = p
				break
			}
		},
		func() {
			for name, p := range r.Plans {
				p.Limit++
				r.Plans[name] = p
				break
			}
		},
		func() {
			if r.Plans == nil {
				r.Plans = map[string]rules.Plan{}
			}
			r.Plans["new"] = rules.Plan{}
		},
		func() {
			if r.Tenants == nil {
				r.Tenants = map[string]rules.TenantOverride{}
			}
			r.Tenants["new"] = rules.TenantOverride{Weight: 2}
		},
		func() {
			for name, o := range r.Tenants {
				o.Limit++
				r.Tenants[name] = o
				break
			}
		},
		func() {
			for name, o := range r.Tenants {
				o.Weight = nan
				r.Tenants[name] = o
				break
			}
		},
		func() { r.Local = !r.Local },
		func() {
			if r.Regions == nil {
				r.Regions = map[string]float64{}
			}
		},
		func() {
			if r.Regions == nil {
				r.Regions = map[string]float64{}
			}
			r.Regions["new"] += 0.125
		},
		func() {
			for name := range r.Regions {
				r.Regions[name] = nan
				break
			}
		},
		func() { r.Shadow = !r.Shadow },
		func() { r.Unlimited = !r.Unlimited },
		func() { r.Replaces = append(r.Replaces, "other") },
		func() { r.Notices = append(r.Notices, 0.5) },
		func() {
			if r.Overage == nil {
				r.Overage = &rules.Overage{UpTo: 2}
			} else {
				r.Overage = nil
			}
		},
		func() {
			if r.Overage != nil {
				r.Overage = &rules.Overage{UpTo: r.Overage.UpTo + 0.5}
			}
		},
		func() {
			if r.Overage != nil {
				r.Overage = &rules.Overage{UpTo: nan}
			}
		},
		func() {
			if r.Notices == nil {
				r.Notices = []float64{}
			}
		},
		func() {
			if r.Replaces == nil {
				r.Replaces = []string{}
			}
		},
	}
	for range rapid.IntRange(1, 2).Draw(t, "changes") {
		changes[rapid.IntRange(0, len(changes)-1).Draw(t, "change")]()
	}
}

// TestNamesFitTheWire: every name a valid rule holds (its own, and the
// tenants, plans and regions it names, which usage reports and ledger
// lines carry) is within the wire's bound, so it is billed under the name
// the rule gives it.
func TestNamesFitTheWire(t *testing.T) {
	if rules.MaxNameLen > allotpb.MaxNameLen || rules.MaxRuleNameLen > allotpb.MaxNameLen {
		t.Fatalf("rules allows names of %d bytes (rule names %d); the wire %d", rules.MaxNameLen, rules.MaxRuleNameLen, allotpb.MaxNameLen)
	}
	long := strings.Repeat("t", rules.MaxNameLen)
	r := rules.Rule{Name: strings.Repeat("r", rules.MaxRuleNameLen), Scope: rules.Tenant, Algorithm: algo.FixedWindow, Limit: 5, Period: time.Minute,
		Intent: lease.Quota, Plans: map[string]rules.Plan{long: {Limit: 9}}, Tenants: map[string]rules.TenantOverride{long: {Limit: 7}},
		Regions: map[string]float64{long: 1}}
	if errs := r.Validate(); len(errs) > 0 {
		t.Fatalf("a rule at the bounds: %v", errs)
	}
	for _, name := range []string{r.Name, long} {
		if allotpb.BoundName(name) != name {
			t.Errorf("the wire bounds a %d-byte name a rule may hold", len(name))
		}
	}
	r.Name += "r"
	r.Tenants = map[string]rules.TenantOverride{long + "t": {Limit: 7}}
	got := map[string]bool{}
	for _, e := range r.Validate() {
		got[e.Field] = true
	}
	if !got["name"] || !got["tenants."+long+"t"] {
		t.Errorf("a rule one byte beyond the bounds: %v", r.Validate())
	}
}
