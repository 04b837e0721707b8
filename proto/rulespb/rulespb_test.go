package rulespb

import (
	"errors"
	"reflect"
	"testing"

	"github.com/allot-io/allot/lease/rules"
	"github.com/allot-io/allot/lease/rules/rulestest"
	allotpb "github.com/allot-io/allot/proto"
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
