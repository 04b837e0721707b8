package shard

import (
	"testing"

	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/protobuf/proto"
)

// FuzzMap: any bytes an agent may be sent as a shard map either are
// refused with ErrInvalid or give a map that routes every slot to a listed
// group and survives its own wire form unchanged. Never a panic.
func FuzzMap(f *testing.F) {
	m := Single("main", []string{"127.0.0.1:7400"})
	m.Groups["g1"] = []string{"127.0.0.1:7410"}
	_ = m.Assign(10, 5000, "g1")
	seed, _ := proto.Marshal(m.Proto())
	f.Add(seed)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		pm := &allotpb.ShardMap{}
		if proto.Unmarshal(b, pm) != nil {
			return
		}
		got, err := FromProto(pm)
		if err != nil {
			return
		}
		for s := 0; s < Slots; s++ {
			if _, ok := got.Groups[got.Owner(Slot(s))]; !ok {
				t.Fatalf("slot %d routed to %q, not a listed group", s, got.Owner(Slot(s)))
			}
		}
		again, err := FromProto(got.Proto())
		if err != nil {
			t.Fatalf("a map read does not read back: %v", err)
		}
		for s := 0; s < Slots; s++ {
			if again.Owner(Slot(s)) != got.Owner(Slot(s)) {
				t.Fatalf("slot %d: %s, then %s", s, got.Owner(Slot(s)), again.Owner(Slot(s)))
			}
		}
	})
}

// FuzzParseRange: a slot range an operator types is refused or is a range
// within 0..Slots-1.
func FuzzParseRange(f *testing.F) {
	for _, s := range []string{"0", "5-10", "0-16383", "16384", "-1", "3-1", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		first, last, err := ParseRange(s)
		if err == nil && (first > last || int(last) >= Slots) {
			t.Fatalf("ParseRange(%q) = %d..%d", s, first, last)
		}
	})
}
