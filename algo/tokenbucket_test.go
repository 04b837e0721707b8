package algo

import (
	"testing"
	"time"
)

// TestTokenBucketBurstAndRate is the design's product example: 100 requests
// per second sustained, a burst of 500 fine. A full bucket admits 500 at
// once; after that it admits the refill rate and no more.
func TestTokenBucketBurstAndRate(t *testing.T) {
	l := mustNew(t, Config{Algorithm: TokenBucket, Limit: 100, Period: time.Second, Burst: 500})
	burst := 0
	for l.AllowAt(t0, 1).Allowed {
		burst++
	}
	if burst != 500 {
		t.Fatalf("burst admitted %d, want 500", burst)
	}
	// Sustained: one request every millisecond for 10 s offers 10,000;
	// the bucket refills 100 per second, so 1,000 are admitted.
	admitted := 0
	for ms := 1; ms <= 10_000; ms++ {
		if l.AllowAt(at(time.Duration(ms)*time.Millisecond), 1).Allowed {
			admitted++
		}
	}
	if admitted != 1000 {
		t.Errorf("sustained: admitted %d in 10 s, want 1000", admitted)
	}
}

func TestTokenBucketSteps(t *testing.T) {
	ms := time.Millisecond
	l := mustNew(t, Config{Algorithm: TokenBucket, Limit: 10, Period: time.Second, Burst: 3})
	run(t, l.AllowAt, []step{
		{0, 1, true, 2, 0, 100 * ms},
		{0, 2, true, 0, 0, 300 * ms},
		{0, 1, false, 0, 100 * ms, 300 * ms},
		{0, 0, true, 0, 100 * ms, 300 * ms}, // peek: one token in 100 ms
		{99 * ms, 1, false, 0, ms, 201 * ms},
		{100 * ms, 1, true, 0, 0, 300 * ms}, // exactly one token refilled
		{350 * ms, 3, false, 2, 50 * ms, 50 * ms},
		{350 * ms, 4, false, 2, Never, 50 * ms},
		{10 * time.Second, 3, true, 0, 0, 300 * ms},
	})
	// Burst 0 means one period's worth.
	def := mustNew(t, Config{Algorithm: TokenBucket, Limit: 7, Period: time.Second})
	if d := def.AllowAt(t0, 7); !d.Allowed || d.Limit != 7 {
		t.Errorf("default capacity: got %+v, want 7 admitted at once", d)
	}
}

// TestTokenBucketTimeBackwards checks that an earlier instant refills
// nothing, and that returning to the present does not refill twice.
func TestTokenBucketTimeBackwards(t *testing.T) {
	l := mustNew(t, Config{Algorithm: TokenBucket, Limit: 1, Period: time.Second, Burst: 2})
	run(t, l.AllowAt, []step{
		{10 * time.Second, 2, true, 0, 0, 2 * time.Second},
		{5 * time.Second, 1, false, 0, 6 * time.Second, 7 * time.Second},
		{11 * time.Second, 1, true, 0, 0, 2 * time.Second},
		{11 * time.Second, 1, false, 0, time.Second, 2 * time.Second},
	})
}
