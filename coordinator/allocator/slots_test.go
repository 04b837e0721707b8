package allocator

import (
	"testing"
	"time"

	"github.com/allot-io/allot/internal/shard"
)

func TestMovedSlotsLearn(t *testing.T) {
	a := New(Config{Region: "eu", ReportInterval: time.Second, LeaseTTL: 5 * time.Second})
	acme := shard.Of("acme")
	if a.slotLearning("acme", 0) {
		t.Fatal("learning before any move")
	}
	a.LearnSlots(acme, acme, 100)
	for _, c := range []struct {
		tenant string
		at     int64
		want   bool
	}{
		{"acme", 100, true},
		{"acme", 100 + int64(5*time.Second) - 1, true},
		{"acme", 100 + int64(5*time.Second), false}, // one lease period
		{"other-tenant-in-another-slot", 200, shard.Of("other-tenant-in-another-slot") == acme},
	} {
		if got := a.slotLearning(c.tenant, c.at); got != c.want {
			t.Errorf("slotLearning(%s, %d) = %v, want %v", c.tenant, c.at, got, c.want)
		}
	}
}
