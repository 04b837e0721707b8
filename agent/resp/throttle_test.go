package resp

import (
	"bufio"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/agent/agenttest"
	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
	"github.com/redis/go-redis/v9"
)

// throttleRule takes CL.THROTTLE's keys: a gcra descriptor rule of the
// domain, whose own limit the calls replace.
func throttleRule() rules.Rule {
	r := agenttest.Rule("redis-cell", rules.Descriptor, algo.GCRA, 1, time.Second, lease.Capacity)
	r.Match = rules.Match{Domain: ThrottleDomain, Descriptors: []rules.DescriptorEntry{{Key: "key"}}}
	return r
}

// TestThrottleLikeRedisCell: CL.THROTTLE answers as redis-cell's README
// shows: 30 tokens per 60 s with a burst of 15 admits 16 at once, each
// reply the five integers, then refuses with the time to retry.
func TestThrottleLikeRedisCell(t *testing.T) {
	_, _, addr := serve(t, Config{}, throttleRule())
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	defer rdb.Close()
	ctx := context.Background()
	call := func(args ...any) []int64 {
		t.Helper()
		v, err := rdb.Do(ctx, append([]any{"CL.THROTTLE"}, args...)...).Result()
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, x := range v.([]any) {
			out = append(out, x.(int64))
		}
		return out
	}
	// redis-cell's README: CL.THROTTLE user123 15 30 60 1.
	if got, want := call("user123", 15, 30, 60, 1), []int64{0, 16, 15, -1, 2}; !equal(got, want) {
		t.Fatalf("first call: %v, want %v (redis-cell's README)", got, want)
	}
	for i := 2; i <= 16; i++ {
		got := call("user123", 15, 30, 60)
		if got[0] != 0 || got[1] != 16 || got[2] != int64(16-i) || got[3] != -1 || got[4] != int64(2*i) {
			t.Fatalf("call %d: %v", i, got)
		}
	}
	got := call("user123", 15, 30, 60)
	if got[0] != 1 || got[2] != 0 || got[3] != 2 || got[4] != 32 {
		t.Fatalf("over the burst: %v, want limited, 0 left, retry in 2 s, reset in 32 s", got)
	}
	// A quantity of 0 asks without spending; another key is its own.
	if got := call("user123", 15, 30, 60, 0); got[0] != 1 {
		t.Fatalf("a peek of an exhausted key: %v", got)
	}
	if got := call("other", 15, 30, 60, 5); got[0] != 0 || got[2] != 11 {
		t.Fatalf("another key, quantity 5: %v", got)
	}
	for _, tc := range []struct {
		args []any
		want string
	}{
		{[]any{"k", 15, 30}, "ERR wrong number of arguments for 'cl.throttle'"},
		{[]any{"k", "x", 30, 60}, "ERR max_burst 'x'"},
		{[]any{"k", 15, 0, 60}, "ERR count must be at least 1"},
		{[]any{"k", 15, 30, 0}, "ERR period must be from 1"},
		{[]any{"k", 15, 30, 60, -1}, "ERR quantity '-1'"},
		{[]any{strings.Repeat("k", agent.MaxAttrLen+1), 15, 30, 60}, "ERR key: at most"},
	} {
		err := rdb.Do(ctx, append([]any{"CL.THROTTLE"}, tc.args...)...).Err()
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%.60v: %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestThrottleNeedsARule: without a descriptor rule of the domain,
// CL.THROTTLE says what to add instead of admitting uncounted.
func TestThrottleNeedsARule(t *testing.T) {
	_, _, addr := serve(t, Config{}, quota(3))
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	defer rdb.Close()
	err := rdb.Do(context.Background(), "CL.THROTTLE", "k", 1, 1, 1).Err()
	if err == nil || !strings.Contains(err.Error(), `no descriptor rule of domain "cl.throttle"`) {
		t.Fatalf("%v", err)
	}
}

// TestThrottleAllocatesNothing: a CL.THROTTLE for a key and limit seen
// before allocates nothing.
func TestThrottleAllocatesNothing(t *testing.T) {
	_, s, _ := serve(t, Config{}, throttleRule())
	in := "*5\r\n$11\r\nCL.THROTTLE\r\n$4\r\nuser\r\n$2\r\n15\r\n$7\r\n1000000\r\n$2\r\n60\r\n"
	src := strings.NewReader("")
	c := &conn{s: s, rd: newReader(src, defaultBufSize), intern: map[string]string{}}
	c.w.w = bufio.NewWriterSize(io.Discard, defaultBufSize)
	run := func() {
		src.Reset(in)
		c.rd.r.Reset(src)
		args, err := c.rd.next()
		if err != nil {
			t.Fatal(err)
		}
		c.dispatch(args)
		c.w.w.Flush()
	}
	run()
	if n := testing.AllocsPerRun(1000, run); n != 0 {
		t.Fatalf("CL.THROTTLE allocates %v per command", n)
	}
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
