package sidecarclient

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/agent/sidecar"
	allotpb "github.com/allot-io/allot/proto"
)

// Errors callers branch on.
var (
	// ErrClosed is returned by Check after Close.
	ErrClosed = errors.New("sidecarclient: closed")
	// ErrInvalid wraps the sidecar's refusal of a malformed request
	// (a field over its bound, a cost out of range): it was not counted.
	ErrInvalid = errors.New("sidecarclient: invalid request")
	// ErrStream wraps a failure of the stream a check was on: the check
	// may or may not have been decided and counted. The next Check opens
	// a new stream.
	ErrStream = errors.New("sidecarclient: stream failed")
)

// DefaultDepth is how many batches are in flight on the stream at once.
const DefaultDepth = 4

// Client asks a sidecar for decisions. It is safe for concurrent use:
// concurrent Checks share one stream and travel in batches.
type Client struct {
	rpc   allotpb.SidecarServiceClient
	conn  *grpc.ClientConn // closed by Close when New dialed it
	depth int
	ctx   context.Context
	stop  context.CancelFunc
	calls sync.Pool

	mu     sync.Mutex
	queue  []*call
	sess   *session // the stream in use; nil until the next Check
	closed bool
}

// call is one caller's check, waiting for its answer.
type call struct {
	req  allotpb.CheckRequest
	d    agent.Decision
	err  error
	done chan struct{} // one send per use
}

// New dials a sidecar's gRPC address (host:port, or unix:///path for a
// Unix-domain socket). Without options the connection is plain: a sidecar
// on loopback or a local socket. Pass grpc.WithTransportCredentials for
// one serving TLS.
func New(target string, opts ...grpc.DialOption) (*Client, error) {
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("sidecarclient: dialing %s: %w", target, err)
	}
	c := NewFromConn(conn, DefaultDepth)
	c.conn = conn
	return c, nil
}

// NewFromConn makes a client on a connection the caller owns, with depth
// batches in flight at once (DefaultDepth when depth < 1).
func NewFromConn(cc grpc.ClientConnInterface, depth int) *Client {
	if depth < 1 {
		depth = DefaultDepth
	}
	ctx, stop := context.WithCancel(context.Background())
	c := &Client{rpc: allotpb.NewSidecarServiceClient(cc), depth: depth, ctx: ctx, stop: stop}
	c.calls.New = func() any { return &call{done: make(chan struct{}, 1)} }
	return c
}

// Check asks the sidecar to decide one request and waits for the answer,
// or for ctx. A malformed request fails with ErrInvalid; a broken stream
// with ErrStream, when the caller decides (fail open or closed) as it
// would with the sidecar down.
func (c *Client) Check(ctx context.Context, req agent.Request) (agent.Decision, error) {
	cl := c.calls.Get().(*call)
	sidecar.RequestToProto(req, &cl.req)
	cl.err = nil
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return agent.Decision{}, ErrClosed
	}
	if c.sess == nil {
		c.sess = c.newSession()
	}
	s := c.sess
	c.queue = append(c.queue, cl)
	c.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	select {
	case <-cl.done:
		d, err := cl.d, cl.err
		c.calls.Put(cl)
		return d, err
	case <-ctx.Done():
		// The call is answered later into a struct nobody reads again:
		// it is not put back for reuse.
		return agent.Decision{}, ctx.Err()
	}
}

// Close ends the stream and, when New dialed it, the connection. Checks
// waiting for answers fail with ErrStream.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.stop()
	if c.conn != nil {
		return c.conn.Close()
	}
	return nil
}

// take removes up to max queued calls, in order.
func (c *Client) take(max int) []*call {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := min(len(c.queue), max)
	if n == 0 {
		return nil
	}
	out := make([]*call, n)
	copy(out, c.queue)
	rest := copy(c.queue, c.queue[n:])
	clear(c.queue[rest:])
	c.queue = c.queue[:rest]
	return out
}

// session is one CheckStream: a sender goroutine that batches the queue
// and a receiver that hands each batch's results to its callers.
type session struct {
	c        *Client
	ctx      context.Context
	cancel   context.CancelFunc
	wake     chan struct{}
	inflight chan []*call
	failOnce sync.Once
}

// newSession starts a stream. Called with c.mu held.
func (c *Client) newSession() *session {
	ctx, cancel := context.WithCancel(c.ctx)
	s := &session{c: c, ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1), inflight: make(chan []*call, c.depth)}
	go s.send()
	return s
}

func (s *session) send() {
	// A batch queued in flight as the session failed is answered here:
	// the sender is the only one to queue them, and it is done.
	defer s.drain(fmt.Errorf("%w: %w", ErrStream, context.Canceled))
	stream, err := s.c.rpc.CheckStream(s.ctx)
	if err != nil {
		s.fail(err)
		return
	}
	go s.receive(stream)
	batch := &allotpb.CheckBatch{}
	var id uint64
	for {
		select {
		case <-s.wake:
		case <-s.ctx.Done():
			s.fail(s.ctx.Err())
			return
		}
		for {
			calls := s.c.take(sidecar.MaxCheckBatch)
			if len(calls) == 0 {
				break
			}
			id++
			batch.Id = id
			batch.Checks = batch.Checks[:0]
			for _, cl := range calls {
				batch.Checks = append(batch.Checks, &cl.req)
			}
			// Queued in flight before it is sent, so the receiver always
			// finds the batch an answer is for; a full queue holds the
			// sender back while more checks gather into the next batch.
			select {
			case s.inflight <- calls:
			case <-s.ctx.Done():
				answer(calls, fmt.Errorf("%w: %w", ErrStream, s.ctx.Err()))
				s.fail(s.ctx.Err())
				return
			}
			if err := stream.Send(batch); err != nil {
				s.fail(err)
				return
			}
		}
	}
}

func (s *session) receive(stream allotpb.SidecarService_CheckStreamClient) {
	res := &allotpb.CheckResults{}
	for {
		res.Reset()
		if err := stream.RecvMsg(res); err != nil {
			s.fail(err)
			return
		}
		var calls []*call
		select {
		case calls = <-s.inflight:
		default:
			s.fail(errors.New("an answer to no batch sent"))
			return
		}
		switch {
		case res.Error != "":
			answer(calls, fmt.Errorf("%w: %s", ErrInvalid, res.Error))
		case len(res.Results) != len(calls):
			answer(calls, fmt.Errorf("%w: %d results for %d checks", ErrStream, len(res.Results), len(calls)))
		default:
			for i, cl := range calls {
				r := res.Results[i]
				if r.Error != "" {
					cl.err = fmt.Errorf("%w: %s", ErrInvalid, r.Error)
				} else {
					cl.d = sidecar.DecisionFromProto(r)
				}
				cl.done <- struct{}{}
			}
		}
	}
}

// fail ends the session: its batches in flight and the calls queued for
// it are answered with the error, and the next Check starts a new stream.
func (s *session) fail(err error) {
	s.failOnce.Do(func() {
		s.cancel()
		err = fmt.Errorf("%w: %w", ErrStream, err)
		s.c.mu.Lock()
		if s.c.sess == s {
			s.c.sess = nil
		}
		queued := s.c.queue
		s.c.queue = nil
		s.c.mu.Unlock()
		answer(queued, err)
		s.drain(err)
	})
}

// drain answers the batches in flight with err.
func (s *session) drain(err error) {
	for {
		select {
		case calls := <-s.inflight:
			answer(calls, err)
		default:
			return
		}
	}
}

func answer(calls []*call, err error) {
	for _, cl := range calls {
		cl.err = err
		cl.done <- struct{}{}
	}
}
