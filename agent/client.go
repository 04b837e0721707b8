package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/allot-io/allot/coordinator/auth"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// leaderTrailer is where a follower names the leader when it refuses a
// report (coordinator.LeaderTrailer).
const leaderTrailer = "allot-leader"

// client reaches the coordinator cluster: it prefers the member that last
// answered, follows a follower's pointer to the leader, and fails over to
// the next member when one does not answer.
type client struct {
	mu    sync.Mutex
	addrs []string
	cur   int
	conns map[string]*grpc.ClientConn
	opts  []grpc.DialOption
}

// newClient dials the coordinators with the credentials cfg names.
func newClient(cfg *Config) (*client, error) {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	onError := func(err error) { cfg.Logger.Error("a changed credential file could not be loaded", "error", err) }
	switch {
	case cfg.TLS != nil:
		opts = []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg.TLS))}
	case cfg.CAFile != "" || cfg.CertFile != "":
		r, err := auth.NewReloader(auth.TLSFiles{CAFile: cfg.CAFile, CertFile: cfg.CertFile, KeyFile: cfg.KeyFile}, onError)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		opts = []grpc.DialOption{grpc.WithTransportCredentials(r.ClientCredentials())}
	}
	if cfg.TokenFile != "" {
		tok, err := auth.NewTokenCredentials(cfg.TokenFile, onError)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		opts = append(opts, grpc.WithPerRPCCredentials(tok))
	}
	// Reconnect within a couple of seconds of a coordinator coming back,
	// not gRPC's default of up to two minutes: an agent cut off is running
	// on its fail modes.
	opts = append(opts,
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second}, MinConnectTimeout: time.Second}),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20), grpc.MaxCallRecvMsgSize(64<<20)))
	opts = append(opts, cfg.DialOptions...)
	return &client{addrs: slices.Clone(cfg.Coordinators), conns: map[string]*grpc.ClientConn{}, opts: opts}, nil
}

func (c *client) stub(addr string) (allotpb.AgentServiceClient, error) {
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
	return allotpb.NewAgentServiceClient(cc), nil
}

func (c *client) current() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.addrs[c.cur%len(c.addrs)]
}

// prefer makes addr the member to call first, adding it if it is new.
func (c *client) prefer(addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.Index(c.addrs, addr)
	if i < 0 {
		c.addrs = append(c.addrs, addr)
		i = len(c.addrs) - 1
	}
	c.cur = i
}

func (c *client) next() {
	c.mu.Lock()
	c.cur = (c.cur + 1) % len(c.addrs)
	c.mu.Unlock()
}

// learn adds members the cluster told us about.
func (c *client) learn(addrs []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range addrs {
		if a != "" && !slices.Contains(c.addrs, a) {
			c.addrs = append(c.addrs, a)
		}
	}
}

var errNoCoordinator = errors.New("agent: no coordinator answered")

// Transport carries reports to the coordinators. The default dials
// Config.Coordinators with gRPC, follows the leader and fails over; a
// simulator or test may carry reports itself.
type Transport interface {
	Report(ctx context.Context, req *allotpb.ReportRequest) (*allotpb.ReportResponse, error)
}

// Report sends one report, trying every member at most once (and the
// leader a follower points to), within ctx.
func (c *client) Report(ctx context.Context, req *allotpb.ReportRequest) (*allotpb.ReportResponse, error) {
	c.mu.Lock()
	tries := len(c.addrs) + 1
	c.mu.Unlock()
	lastErr := errNoCoordinator
	for i := 0; i < tries && ctx.Err() == nil; i++ {
		addr := c.current()
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
		if leader := trailer.Get(leaderTrailer); len(leader) > 0 && leader[0] != addr {
			c.prefer(leader[0])
			continue
		}
		c.next()
	}
	return nil, lastErr
}

// attemptContext gives one attempt its part of what is left of ctx's time.
func attemptContext(ctx context.Context, attemptsLeft int) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok || attemptsLeft <= 1 {
		return context.WithCancel(ctx)
	}
	// Half of what is left, at least: the member tried first is most
	// likely the leader, and a leader busy for a moment should not be
	// given up on after a quarter of an interval; a member that is down
	// refuses the connection at once, leaving the rest for the others.
	left := time.Until(deadline)
	return context.WithTimeout(ctx, max(left/time.Duration(attemptsLeft), left/2))
}

func (c *client) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cc := range c.conns {
		cc.Close()
	}
	c.conns = map[string]*grpc.ClientConn{}
}
