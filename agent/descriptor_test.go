package agent

import (
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/lease/rules"
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
