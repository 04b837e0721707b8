// Package clusterclient reaches a coordinator cluster as its agents do:
// it prefers the member that last answered, follows a follower's pointer
// to the leader (the allot-leader trailer), and fails over to the next
// member when one does not answer. Agents use it to report to their
// region's cluster, and a region's leader to report to its parent.
package clusterclient

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	allotpb "github.com/allot-io/allot/proto"
)

// LeaderTrailer is where a follower names the leader when it refuses a
// report (coordinator.LeaderTrailer).
const LeaderTrailer = "allot-leader"

// ErrNoCoordinator is returned when no member could be tried.
var ErrNoCoordinator = errors.New("clusterclient: no coordinator answered")

// Client reports to one cluster. It is safe for concurrent use.
type Client struct {
	mu    sync.Mutex
	addrs []string
	cur   int
	conns map[string]*grpc.ClientConn
	opts  []grpc.DialOption
}

// New returns a client of the members at addrs, dialled with opts
// (credentials, connect parameters), connecting as it first calls each.
func New(addrs []string, opts []grpc.DialOption) *Client {
	return &Client{addrs: slices.Clone(addrs), conns: map[string]*grpc.ClientConn{}, opts: slices.Clone(opts)}
}

func (c *Client) stub(addr string) (allotpb.AgentServiceClient, error) {
	cc, err := c.conn(addr)
	if err != nil {
		return nil, err
	}
	return allotpb.NewAgentServiceClient(cc), nil
}

func (c *Client) current() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.addrs) == 0 {
		return ""
	}
	return c.addrs[c.cur%len(c.addrs)]
}

// prefer makes addr the member to call first, adding it if it is new.
func (c *Client) prefer(addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.Index(c.addrs, addr)
	if i < 0 {
		c.addrs = append(c.addrs, addr)
		i = len(c.addrs) - 1
	}
	c.cur = i
}

func (c *Client) next() {
	c.mu.Lock()
	if len(c.addrs) > 0 {
		c.cur = (c.cur + 1) % len(c.addrs)
	}
	c.mu.Unlock()
}

// Learn adds members the cluster told us about (ReportResponse's
// coordinators).
func (c *Client) Learn(addrs []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range addrs {
		if a != "" && !slices.Contains(c.addrs, a) {
			c.addrs = append(c.addrs, a)
		}
	}
}

// Report sends one report, trying every member at most once (and the
// leader a follower points to), within ctx.
func (c *Client) Report(ctx context.Context, req *allotpb.ReportRequest) (*allotpb.ReportResponse, error) {
	c.mu.Lock()
	tries := len(c.addrs) + 1
	c.mu.Unlock()
	lastErr := ErrNoCoordinator
	var slow string // a member that did not answer in time, in this call
	for i := 0; i < tries && ctx.Err() == nil; i++ {
		addr := c.current()
		if addr == "" {
			break
		}
		stub, err := c.stub(addr)
		if err != nil {
			lastErr = err
			c.next()
			continue
		}
		var trailer metadata.MD
		actx, cancel := attemptContext(ctx, tries-i)
		resp, err := stub.Report(actx, req, grpc.Trailer(&trailer))
		cancel()
		if err == nil {
			return resp, nil
		}
		lastErr = err
		if final(err) {
			return nil, err
		}
		if leader := trailer.Get(LeaderTrailer); len(leader) > 0 && leader[0] != addr {
			c.prefer(leader[0])
			if leader[0] == slow {
				// The leader is there but slow: asking it again in this
				// call, with less time, and having followers point back to
				// it at every report, only adds to its load (a slow
				// leader drew 34,198 redirects in 3 minutes: issue 41).
				// The next report goes to it.
				return nil, lastErr
			}
			continue
		}
		if status.Code(err) == codes.DeadlineExceeded {
			slow = addr
		}
		c.next()
	}
	return nil, lastErr
}

// final reports whether an error is the cluster's answer about the
// report itself, which any other member would give as well: a report
// refused as malformed, by its shard group, or for its credential is not
// tried elsewhere, so that the caller sees that answer and not a
// follower's pointer to the leader that gave it.
func final(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.PermissionDenied, codes.Unauthenticated:
		return true
	}
	return false
}

// attemptContext gives one attempt its part of what is left of ctx's time.
func attemptContext(ctx context.Context, attemptsLeft int) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok || attemptsLeft <= 1 {
		return context.WithCancel(ctx)
	}
	// Three quarters of what is left, at least: the member tried first is
	// most likely the leader, whose answer may wait for its next
	// allocation round (up to a quarter of an interval) on top of the
	// commit of the report's usage, and a leader busy for a moment should
	// not be given up on (given half, half the reports of a 100-gateway
	// fleet timed out at the leader, then went to a follower that pointed
	// back to it). A member that is down refuses the connection at once,
	// leaving the rest for the others.
	left := time.Until(deadline)
	return context.WithTimeout(ctx, max(left/time.Duration(attemptsLeft), left*3/4))
}

// Close closes every connection.
func (c *Client) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cc := range c.conns {
		cc.Close()
	}
	c.conns = map[string]*grpc.ClientConn{}
}

// Sibling is a client of another cluster (a shard group of the same
// region), dialled with this one's options.
func (c *Client) Sibling(addrs []string) *Client { return New(addrs, c.opts) }

// Call runs fn against the members in turn, from the preferred one, until
// one answers without error, within ctx: for reads any member serves.
func (c *Client) Call(ctx context.Context, fn func(ctx context.Context, cc grpc.ClientConnInterface) error) error {
	c.mu.Lock()
	tries := len(c.addrs)
	c.mu.Unlock()
	lastErr := ErrNoCoordinator
	for i := 0; i < tries && ctx.Err() == nil; i++ {
		addr := c.current()
		if addr == "" {
			break
		}
		cc, err := c.conn(addr)
		if err == nil {
			actx, cancel := attemptContext(ctx, tries-i)
			err = fn(actx, cc)
			cancel()
			if err == nil {
				return nil
			}
		}
		lastErr = err
		c.next()
	}
	return lastErr
}

func (c *Client) conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cc := c.conns[addr]
	if cc == nil {
		var err error
		if cc, err = grpc.NewClient(addr, c.opts...); err != nil {
			return nil, err
		}
		c.conns[addr] = cc
	}
	return cc, nil
}
