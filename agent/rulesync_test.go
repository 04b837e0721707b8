package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/proto/rulespb"
	"github.com/allot-io/allot/rules"
	"google.golang.org/protobuf/encoding/protowire"
)

// A rule from a newer version, with a field this agent does not know, is
// left out as broken rather than enforced as another rule; the rest of
// the set is enforced.
func TestRuleWithUnknownFieldsIsLeftOut(t *testing.T) {
	monthly := rule("monthly", rules.Tenant, algo.FixedWindow, 100, algo.Month.Nominal(), lease.Quota)
	monthly.Cycle = &rules.Cycle{Unit: algo.Month, Anchor: rules.Anchor{AnchorDay: 17}}
	plain := rule("plain", rules.Tenant, algo.FixedWindow, 100, time.Minute, lease.Quota)
	newer := rulespb.ToProto(&monthly)
	// Field 99, a varint: what a later version might add to a cycle.
	newer.Cycle.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1))
	set, problems, err := setFromProto(&allotpb.RuleSet{Version: 3, Rules: []*allotpb.Rule{newer, rulespb.ToProto(&plain)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := set.Get("plain"); !ok || set.Len() != 1 {
		t.Errorf("set %v: want plain alone", set.Rules())
	}
	if len(problems) != 1 || problems[0].Rule != "monthly" || problems[0].Problem != ProblemBroken || !strings.Contains(problems[0].Reason, "does not know") {
		t.Errorf("problems %+v, want monthly broken for its unknown fields", problems)
	}
}
