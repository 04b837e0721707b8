package resp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/allot-io/allot/agent"
	"github.com/hashicorp/go-hclog"
)

// Defaults of Config.
const (
	DefaultMaxConns     = 10_000
	DefaultMaxPipeline  = 1024
	DefaultIdleTimeout  = 5 * time.Minute
	DefaultWriteTimeout = 10 * time.Second
	defaultBufSize      = 16 << 10
	maxInternedPerConn  = 1 << 16
)

// Config configures a Server.
type Config struct {
	// MaxConns bounds the connections served at once; one more is
	// answered "-ERR max number of clients reached" and closed.
	MaxConns int
	// MaxPipeline bounds the commands answered before the replies are
	// written out: a client that pipelines more gets them in several
	// writes, never an unbounded buffer.
	MaxPipeline int
	// IdleTimeout closes a connection that sends nothing for that long.
	IdleTimeout time.Duration
	// WriteTimeout closes a connection whose client does not take a
	// write of replies within that long: one that pipelines and never
	// reads holds a goroutine, not the server.
	WriteTimeout time.Duration
	// ThrottleDomain is the descriptor domain of CL.THROTTLE's keys
	// (default ThrottleDomain).
	ThrottleDomain string
	Logger         hclog.Logger
}

// Server serves the Redis protocol for an agent.
type Server struct {
	a   *agent.Agent
	cfg Config
	log hclog.Logger

	conns    atomic.Int64
	commands atomic.Int64
	errors   atomic.Int64

	mu     sync.Mutex
	ls     map[net.Listener]struct{}
	open   map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// New returns a Server for a.
func New(a *agent.Agent, cfg Config) *Server {
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.MaxPipeline <= 0 {
		cfg.MaxPipeline = DefaultMaxPipeline
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.ThrottleDomain == "" {
		cfg.ThrottleDomain = ThrottleDomain
	}
	return &Server{a: a, cfg: cfg, log: cfg.Logger.Named("resp"), ls: map[net.Listener]struct{}{}, open: map[net.Conn]struct{}{}}
}

// ErrServerClosed is returned by Serve after Close.
var ErrServerClosed = errors.New("resp: server closed")

// Serve accepts connections on l until Close; each is served by one
// goroutine.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrServerClosed
	}
	s.ls[l] = struct{}{}
	s.mu.Unlock()
	var backoff time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			return fmt.Errorf("resp: accepting: %w", err)
		}
		backoff = 0
		if s.conns.Add(1) > int64(s.cfg.MaxConns) {
			s.conns.Add(-1)
			_ = c.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = io.WriteString(c, "-ERR max number of clients reached\r\n")
			c.Close()
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			s.conns.Add(-1)
			c.Close()
			return ErrServerClosed
		}
		s.open[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(c)
	}
}

// Close stops the listeners and closes every connection, waiting for
// their goroutines until ctx ends.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	for l := range s.ls {
		l.Close()
	}
	for c := range s.open {
		c.Close()
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stats are the server's counters.
type Stats struct{ Conns, Commands, Errors int64 }

// Stats returns the server's counters: connections open, commands
// answered, error replies.
func (s *Server) Stats() Stats {
	return Stats{s.conns.Load(), s.commands.Load(), s.errors.Load()}
}

// conn is one client connection's state.
type conn struct {
	s      *Server
	c      net.Conn
	rd     *reader
	w      writer
	name   string
	intern map[string]string
	quit   bool
	// CL.THROTTLE's descriptor, reused from call to call.
	desc    [1]agent.Descriptor
	lim     agent.Limit
	entry   [1]agent.Entry
	decided []agent.Decision
}

func (s *Server) serve(nc net.Conn) {
	defer func() {
		s.mu.Lock()
		delete(s.open, nc)
		s.mu.Unlock()
		nc.Close()
		s.conns.Add(-1)
		s.wg.Done()
	}()
	c := &conn{s: s, c: nc, rd: newReader(nc, defaultBufSize), intern: map[string]string{}}
	c.w.w = bufio.NewWriterSize(&deadlineWriter{c: nc, timeout: s.cfg.WriteTimeout}, defaultBufSize)
	pending := 0
	for !c.quit {
		if !c.rd.buffered() {
			// Nothing more read ahead: the batch's replies go in one write.
			if c.flush() != nil {
				return
			}
			pending = 0
			_ = nc.SetReadDeadline(time.Now().Add(s.cfg.IdleTimeout))
		}
		args, err := c.rd.next()
		if err != nil {
			if errors.Is(err, errProtocol) {
				s.errors.Add(1)
				// Redis's words, capitalised as clients match them.
				c.w.err("ERR Protocol error" + strings.TrimPrefix(err.Error(), errProtocol.Error()))
				_ = c.flush()
			}
			return
		}
		if len(args) == 0 {
			continue
		}
		s.commands.Add(1)
		c.dispatch(args)
		if pending++; pending >= s.cfg.MaxPipeline {
			if c.flush() != nil {
				return
			}
			pending = 0
		}
	}
	_ = c.flush()
}

func (c *conn) flush() error {
	if c.w.w.Buffered() == 0 {
		return nil
	}
	return c.w.w.Flush()
}

// deadlineWriter gives each write to the client a deadline of its own.
// The bufio.Writer writes not only when a batch is flushed but also on
// its own, whenever a batch's replies outgrow its buffer: a deadline set
// at the flush alone would, after an idle spell, be the last batch's and
// long past, and the batch, decided and billed, would be answered with a
// closed connection.
type deadlineWriter struct {
	c       net.Conn
	timeout time.Duration
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	_ = w.c.SetWriteDeadline(time.Now().Add(w.timeout))
	return w.c.Write(p)
}

// str returns b as a string, interned: a name seen before costs no
// allocation, and what the agent keeps (a tenant's name in its usage
// counters) never aliases the reader's buffer.
func (c *conn) str(b []byte) string {
	if s, ok := c.intern[string(b)]; ok {
		return s
	}
	if len(c.intern) >= maxInternedPerConn {
		clear(c.intern)
	}
	s := string(b)
	c.intern[s] = s
	return s
}

func (c *conn) fail(format string, args ...any) {
	c.s.errors.Add(1)
	c.w.err(fmt.Sprintf(format, args...))
}

// upper is b upper-cased into buf, for matching command and option names.
func upper(buf *[24]byte, b []byte) []byte {
	if len(b) > len(buf) {
		return nil
	}
	for i, ch := range b {
		if 'a' <= ch && ch <= 'z' {
			ch -= 'a' - 'A'
		}
		buf[i] = ch
	}
	return buf[:len(b)]
}

// dispatch answers one command.
func (c *conn) dispatch(args [][]byte) {
	var nb [24]byte
	name := upper(&nb, args[0])
	switch string(name) {
	case "ALLOT.CHECK":
		c.check(args)
	case "CL.THROTTLE":
		c.throttle(args)
	case "PING":
		switch len(args) {
		case 1:
			c.w.simple("PONG")
		case 2:
			c.w.bulkBytes(args[1])
		default:
			c.wrongArgs(args[0])
		}
	case "ECHO":
		if len(args) != 2 {
			c.wrongArgs(args[0])
			return
		}
		c.w.bulkBytes(args[1])
	case "HELLO":
		c.hello(args)
	case "CLIENT":
		c.client(args)
	case "SELECT":
		if len(args) != 2 {
			c.wrongArgs(args[0])
			return
		}
		if n, ok := parseInt(args[1]); !ok || n != 0 {
			c.fail("ERR DB index is out of range: allot serves database 0 only")
			return
		}
		c.w.simple("OK")
	case "QUIT":
		c.w.simple("OK")
		c.quit = true
	case "RESET":
		c.w.resp3, c.name = false, ""
		c.w.simple("RESET")
	case "COMMAND":
		// Clients ask for the command table (COMMAND, COMMAND DOCS,
		// COMMAND COUNT) for hints only: an empty one serves them.
		if len(args) >= 2 {
			var ub [24]byte
			if string(upper(&ub, args[1])) == "COUNT" {
				c.w.int(0)
				return
			}
		}
		c.w.array(0)
	case "CONFIG":
		// redis-benchmark reads CONFIG GET save and appendonly to print
		// them: no configuration to show.
		c.w.mapHead(0)
	case "INFO":
		c.w.bulk(fmt.Sprintf("# Server\r\nallot_resp:1\r\nconnected_clients:%d\r\n", c.s.conns.Load()))
	default:
		c.fail("ERR unknown command '%s', with args beginning with: %s", printable(args[0]), argsPreview(args[1:]))
	}
}

func (c *conn) wrongArgs(cmd []byte) {
	c.fail("ERR wrong number of arguments for '%s' command", printable(cmd))
}

func argsPreview(args [][]byte) string {
	out := ""
	for i, a := range args {
		if i == 4 {
			break
		}
		out += "'" + printable(a) + "' "
	}
	return out
}

// hello answers HELLO [protover [AUTH user pass] [SETNAME name]]: RESP2
// or RESP3, and the server's description.
func (c *conn) hello(args [][]byte) {
	resp3 := c.w.resp3
	if len(args) >= 2 {
		switch n, ok := parseInt(args[1]); {
		case !ok:
			c.fail("ERR Protocol version is not an integer or out of range")
			return
		case n == 2:
			resp3 = false
		case n == 3:
			resp3 = true
		default:
			c.fail("NOPROTO unsupported protocol version")
			return
		}
		for i := 2; i < len(args); i++ {
			var ub [24]byte
			switch string(upper(&ub, args[i])) {
			case "AUTH":
				i += 2 // the sidecar's RESP port is local; no users
			case "SETNAME":
				if i+1 < len(args) {
					c.name = string(args[i+1])
				}
				i++
			default:
				c.fail("ERR Syntax error in HELLO option '%s'", printable(args[i]))
				return
			}
		}
	}
	c.w.resp3 = resp3
	c.w.mapHead(7)
	c.w.bulk("server")
	c.w.bulk("allot")
	c.w.bulk("version")
	c.w.bulk("7.0.0")
	c.w.bulk("proto")
	if resp3 {
		c.w.int(3)
	} else {
		c.w.int(2)
	}
	c.w.bulk("id")
	c.w.int(1)
	c.w.bulk("mode")
	c.w.bulk("standalone")
	c.w.bulk("role")
	c.w.bulk("master")
	c.w.bulk("modules")
	c.w.array(0)
}

// client answers the CLIENT subcommands clients send on connect.
func (c *conn) client(args [][]byte) {
	if len(args) < 2 {
		c.wrongArgs(args[0])
		return
	}
	var ub [24]byte
	switch string(upper(&ub, args[1])) {
	case "SETNAME":
		if len(args) != 3 {
			c.wrongArgs(args[0])
			return
		}
		c.name = string(args[2])
		c.w.simple("OK")
	case "GETNAME":
		if c.name == "" {
			c.w.null()
			return
		}
		c.w.bulk(c.name)
	case "SETINFO":
		c.w.simple("OK")
	case "ID":
		c.w.int(1)
	default:
		c.fail("ERR unknown subcommand '%s' of CLIENT", printable(args[1]))
	}
}
