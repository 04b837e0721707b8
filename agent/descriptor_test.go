package agent

import (
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
)

// TestCheckDescriptorsAllocatesNothing: deciding a descriptor whose key
// the agent has seen allocates nothing when the caller reuses its slices.
func TestCheckDescriptorsAllocatesNothing(t *testing.T) {
	r := rule("per-ip", rules.Descriptor, algo.TokenBucket, 1_000_000, time.Second, lease.Abuse)
	r.Match = rules.Match{Domain: "edge", Descriptors: []rules.DescriptorEntry{{Key: "remote_address"}, {Key: "path", Value: "/api/*"}}}
	a := standalone(t, newManualClock(), r)
	descs := []Descriptor{{Entries: []Entry{{"remote_address", "10.0.0.1"}, {"path", "/api/items"}}}}
	out := make([]Decision, 0, 1)
	if d := a.CheckDescriptors("edge", descs, 1, out); !d[0].Allowed || d[0].Rule != "per-ip" {
		t.Fatalf("first check: %+v", d)
	}
	if n := testing.AllocsPerRun(1000, func() { out = a.CheckDescriptors("edge", descs, 1, out[:0]) }); n != 0 {
		t.Errorf("CheckDescriptors allocates %v times per call", n)
	}
}

// TestDescriptorRuleNotEnforcedHere: a descriptor rule this agent does not
// enforce (another region's) admits what it matches uncounted, instead of
// handing it to the more general rule.
func TestDescriptorRuleNotEnforcedHere(t *testing.T) {
	general := rule("any-ip", rules.Descriptor, algo.FixedWindow, 1, time.Minute, lease.Abuse)
	general.Match = rules.Match{Domain: "edge", Descriptors: []rules.DescriptorEntry{{Key: "remote_address"}}}
	other := rule("office-us", rules.Descriptor, algo.FixedWindow, 1000, time.Minute, lease.Abuse)
	other.Match = rules.Match{Domain: "edge", Descriptors: []rules.DescriptorEntry{{Key: "remote_address", Value: "10.0.0.1"}}}
	other.Regions = map[string]float64{"us-east": 1}
	a, err := New(Config{Rules: []rules.Rule{general, other}, Region: "eu-west", Clock: newManualClock()})
	if err == nil {
		defer a.Close(t.Context())
		t.Fatal("a static rule for another region should be refused at start (strict)")
	}
	a = standalone(t, newManualClock(), general)
	set, _ := rules.NewSet(2, []rules.Rule{general, other})
	if err := a.install(set, nil, false, sourceStatic); err != nil {
		t.Fatal(err)
	}
	descs := []Descriptor{{Entries: []Entry{{"remote_address", "10.0.0.1"}}}}
	for range 3 {
		if d := a.CheckDescriptors("edge", descs, 1, nil); !d[0].Allowed || d[0].Rule != "office-us" || d[0].Limit != 0 {
			t.Fatalf("the other region's address: %+v; want admitted under office-us, uncounted", d[0])
		}
	}
}
