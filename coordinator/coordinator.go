package coordinator

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/allot-io/allot/coordinator/allocator"
	"github.com/allot-io/allot/coordinator/datadir"
	"github.com/allot-io/allot/coordinator/internal/authz"
	"github.com/allot-io/allot/coordinator/internal/fsm"
	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/coordinator/internal/intake"
	"github.com/allot-io/allot/coordinator/internal/raftnet"
	"github.com/allot-io/allot/coordinator/internal/shardgroup"
	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/allot-io/allot/coordinator/ledgersink"
	"github.com/allot-io/allot/internal/auth"
	"github.com/allot-io/allot/internal/listenerr"
	"github.com/allot-io/allot/internal/tracing"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	"google.golang.org/protobuf/proto"
)

// ErrNotLeader is returned by writes attempted on a member that is not the
// leader; the caller forwards to the leader or follows it.
var ErrNotLeader = errors.New("coordinator: not the leader")

// ErrWouldSplit is returned by New for a member told to bootstrap whose
// data dir shows it already belonged to a cluster.
var ErrWouldSplit = errors.New("coordinator: refusing to start a second cluster")

// ErrRegionChanged is returned by New for a member started with another
// --region than the one its data dir holds the state of.
var ErrRegionChanged = errors.New("coordinator: refusing to serve another region's state")

// Coordinator is one member of a coordinator cluster.
type Coordinator struct {
	cfg     Config
	log     hclog.Logger
	metrics *metrics
	gather  prometheus.Gatherer
	// sums keeps the final part of tenants' balances (finalSums).
	sums finalSums

	fsm       *fsm.FSM
	raft      *raft.Raft
	transport *raft.NetworkTransport
	gate      *raftnet.VoteGate
	store     *datadir.Store
	raftAddr  string
	// startState is what the data dir held at start (fresh, existing or
	// lost), and identity its identity file, once known.
	startState allotpb.DataState
	identityMu sync.Mutex
	identity   *datadir.Identity
	// forming is the view of a member forming a new cluster
	// (--bootstrap-expect): the fresh members it would form with.
	formingMu sync.Mutex
	forming   []string
	// failed is closed, with failErr, when this member must stop.
	failed   chan struct{}
	failErr  error
	failOnce sync.Once

	alloc   *allocator.Allocator
	batcher *intake.Batcher
	// parent is a region cluster's link to its parent; nil without one.
	parent *parentLink
	// sink is the ledger sink (Config.LedgerSink); nil without one.
	sink *ledgersink.Sink
	// exportFailing is the leader's failing export, for Status; nil
	// while export rounds succeed, and off the leader.
	exportFailing atomic.Pointer[exportFailure]
	peers         *peers
	// groups is this cluster's part in its region's shard groups: the
	// map, moves, and the slots' load.
	groups *shardgroup.Group
	// check confirms leadership before a report is answered.
	check *intake.LeaderCheck
	// roundEvery is the configured RoundInterval; 0 derives it from the
	// cluster's report interval.
	roundEvery time.Duration
	// intake bounds the reports taken at once; roundsBehind
	// is set while the last allocation round overran its interval.
	intake       *intake.Bound
	roundsBehind atomic.Bool

	grpc    *grpc.Server
	grpcLis net.Listener
	health  *health.Server
	http    *http.Server
	httpLis net.Listener
	// tls serves this member's certificate and verifies peers' against
	// the CA, re-reading the files when they change; nil without TLS.
	tls *auth.Reloader
	// authz decides who may call what; memberToken is what this member
	// presents to join, nil without a token.
	authz       *authz.Authorizer
	memberToken *auth.TokenCredentials
	newNodes    *intake.NodeGate

	notify  chan bool   // Raft's leadership notifications
	leading atomic.Bool // leader, and ready to serve agents
	ctx     context.Context
	cancel  context.CancelFunc
	// draining is closed when Close begins.
	draining chan struct{}
	// openCalls counts the calls to open methods in flight (endpoint_limits.go).
	openCalls atomic.Int64
	wg        sync.WaitGroup
	closed    atomic.Bool
	// tracer is Config.TracerProvider's; nil when tracing is off.
	tracer trace.Tracer
}

// New starts a coordinator: it opens or creates the Raft state in
// DataDir, listens on the configured addresses, bootstraps or joins, and
// serves. It returns once the listeners are bound; use WaitLeader to wait
// for the cluster to elect a leader.
func New(config Config) (*Coordinator, error) {
	cfg, err := config.withDefaults()
	if err != nil {
		return nil, err
	}
	reg := cfg.Registerer
	var gather prometheus.Gatherer = prometheus.DefaultGatherer
	if reg == nil {
		r := prometheus.NewRegistry()
		reg, gather = r, r
	} else if g, ok := reg.(prometheus.Gatherer); ok {
		gather = g
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Coordinator{
		cfg: cfg, log: cfg.Logger.Named("coordinator"), metrics: newMetrics(reg), gather: gather,
		alloc: allocator.New(allocator.Config{Region: cfg.Region, Global: cfg.Global, Parent: len(cfg.Parent) > 0,
			ReportInterval: cfg.ReportInterval, LeaseTTL: cfg.LeaseTTL}),
		roundEvery: config.RoundInterval, intake: intake.NewBound(cfg.MaxReportsInFlight, cfg.MaxReportEntriesInFlight),
		ctx: ctx, cancel: cancel, draining: make(chan struct{}), failed: make(chan struct{}),
		tracer: tracing.Tracer(cfg.TracerProvider, "github.com/allot-io/allot/coordinator"),
	}
	if err := reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "allot_coordinator_reports_in_flight", Help: "Agent reports this member has taken and not yet answered: the leader's queue (bounded by MaxReportsInFlight).",
	}, func() float64 { return float64(c.intake.InFlight()) })); err != nil {
		cancel()
		return nil, fmt.Errorf("coordinator: registering metrics: %w", err)
	}
	if err := reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "allot_coordinator_report_entries_in_flight", Help: "Entries (key demands and usage counts) of the agent reports this member has taken and not yet answered (bounded by MaxReportEntriesInFlight).",
	}, func() float64 { return float64(c.intake.EntriesInFlight()) })); err != nil {
		cancel()
		return nil, fmt.Errorf("coordinator: registering metrics: %w", err)
	}
	if len(cfg.Parent) > 0 {
		if c.parent, err = newParentLink(&cfg, func(err error) { c.log.Error("a changed parent credential file could not be loaded", "error", err) }); err != nil {
			cancel()
			return nil, fmt.Errorf("%w: Parent: %w", ErrInvalidConfig, err)
		}
	}
	if cfg.LedgerSink != "" {
		// Open only parses the DSN: the database may be down now.
		if c.sink, err = ledgersink.Open(ctx, cfg.LedgerSink, c.log.Named("sink")); err != nil {
			cancel()
			return nil, fmt.Errorf("%w: LedgerSink: %w", ErrInvalidConfig, err)
		}
	}
	c.fsm = fsm.New(c.log.Named("fsm"), c.onApplied)
	c.groups = shardgroup.New(shardgroup.Config{
		ID: c.groupID(), Home: cfg.ShardHome, NodeID: cfg.NodeID, Member: shardMember{c}, Clock: cfg.Clock, Log: c.log,
		Metrics:  shardgroup.Metrics{SlotsOwned: c.metrics.slotsOwned, MovesActive: c.metrics.movesActive, MoveOldest: c.metrics.moveOldest},
		Acquired: c.alloc.LearnSlots,
	})
	c.newNodes = intake.NewNodeGate(cfg.MaxNewNodesPerMinute, cfg.Clock.Now())
	if c.tls, err = cfg.TLS.reloader(c.log); err != nil {
		cancel()
		return nil, err
	}
	if c.authz, c.memberToken, err = authz.New(authz.Config{
		AdminToken: cfg.AdminToken, AuthTokensFile: cfg.AuthTokensFile, TokenFile: cfg.TokenFile, Certs: cfg.TLS.CAFile != "",
		Now: cfg.Clock.Now, Log: c.log, Refusals: c.metrics.authRefusals,
	}); err != nil {
		cancel()
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := c.startRaft(); err != nil {
		cancel()
		return nil, err
	}
	c.check = intake.NewLeaderCheck(c.verifyLeader)
	c.batcher = intake.NewBatcher(cfg.ApplyWindow, c.applyReports, cfg.Clock.Now)
	if err := c.startGRPC(); err != nil {
		c.shutdown()
		return nil, err
	}
	if err := c.startHTTP(); err != nil {
		c.shutdown()
		return nil, err
	}
	c.goRun(c.watchLeadership)
	c.goRun(c.batcher.Run)
	c.goRun(c.watchMembership)
	switch {
	case cfg.BootstrapExpect > 0 && c.startState != allotpb.DataState_DATA_STATE_EXISTING:
		c.goRun(c.formCluster)
	case len(cfg.Join) > 0:
		c.goRun(c.joinCluster)
	}
	c.log.Info("coordinator started", "id", cfg.NodeID, "raft", c.raftAddr, "grpc", c.GRPCAddr(), "http", c.HTTPAddr(), "region", cfg.Region)
	return c, nil
}

func (c *Coordinator) goRun(fn func(context.Context)) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		fn(c.ctx)
	}()
}

func (c *Coordinator) startRaft() (err error) {
	cfg := c.cfg
	if err := c.openDataDir(); err != nil {
		return err
	}
	defer func() {
		if err != nil && c.raft == nil {
			c.store.Close()
			c.store = nil
		}
	}()
	rlog := cfg.Logger.Named("raft")
	if c.tls != nil {
		// Members only: with a CA, the transport takes certificates that
		// name a member, not an agent's or an admin's the CA also signed.
		server := c.tls.ServerConfig(c.tls.HasCA())
		if c.tls.HasCA() {
			auth.RequirePeerRole(server, auth.Member, c.now)
		}
		// And the other way: a member dials members only.
		client := func() *tls.Config {
			cfg := c.tls.ClientConfig()
			if c.tls.HasCA() {
				auth.RequirePeerRole(cfg, auth.Member, c.now)
			}
			return cfg
		}
		stream, err := raftnet.NewTLSStreamLayer(cfg.RaftAddr, cfg.advertised(cfg.RaftAddr), server, client)
		if err != nil {
			return err
		}
		c.transport = raft.NewNetworkTransportWithLogger(stream, 5, 10*time.Second, rlog)
	} else {
		// The listener's own address is advertised, or AdvertiseHost with
		// its port when it binds every interface.
		var adv net.Addr
		if a := cfg.advertised(cfg.RaftAddr); a != cfg.RaftAddr {
			if adv, err = net.ResolveTCPAddr("tcp", a); err != nil {
				return fmt.Errorf("coordinator: raft advertise address %s: %w", a, err)
			}
		}
		c.transport, err = raft.NewTCPTransportWithLogger(cfg.RaftAddr, adv, 5, 10*time.Second, rlog)
		switch {
		case errors.Is(err, syscall.EADDRINUSE):
			return fmt.Errorf("coordinator: raft transport: %w", listenerr.Explain("raft-addr", cfg.RaftAddr, err))
		case err != nil:
			return fmt.Errorf("coordinator: raft transport on %s (give a host others can dial): %w", cfg.RaftAddr, err)
		}
	}
	c.raftAddr = string(c.transport.LocalAddr())
	c.gate = raftnet.NewVoteGate(c.transport, c.log)
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.Logger = rlog
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = min(cfg.HeartbeatTimeout/2, rc.LeaderLeaseTimeout)
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.TrailingLogs = max(cfg.SnapshotThreshold, 1024)
	notify := make(chan bool, 8)
	rc.NotifyCh = notify
	r, err := raft.NewRaft(rc, c.raftFSM(), c.store.Log, c.store.Log, c.store.Snapshots, c.gate)
	if err != nil {
		c.gate.Close()
		c.gate = nil
		return fmt.Errorf("coordinator: starting Raft from %s: %w", cfg.DataDir, err)
	}
	c.raft = r
	c.gate.SetHasLog(func() bool { return c.raft.LastIndex() > 0 })
	c.notify = notify
	if (cfg.Bootstrap || cfg.BootstrapExpect == 1) && c.store.State == datadir.Fresh {
		f := c.raft.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{ID: rc.LocalID, Address: c.transport.LocalAddr()}}})
		if err := f.Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			return fmt.Errorf("coordinator: bootstrap: %w", err)
		}
		c.log.Warn("bootstrapped a new one-member cluster: its data dir was empty; if this member belonged to a cluster of several and lost its disk, this is a second cluster: stop it and see " + datadir.RunbookLostDisk + " (several members are formed with --bootstrap-expect)")
	}
	return nil
}

// raftFSM is the state machine Raft drives: the FSM, behind the
// beforeApply hook when a test set one.
func (c *Coordinator) raftFSM() raft.FSM {
	if h := c.cfg.hooks; h != nil && h.beforeApply != nil {
		return hookedFSM{FSM: c.fsm, before: h.beforeApply}
	}
	return c.fsm
}

type hookedFSM struct {
	*fsm.FSM
	before func(*raft.Log)
}

func (h hookedFSM) Apply(l *raft.Log) any {
	h.before(l)
	return h.FSM.Apply(l)
}

// openDataDir checks and opens the member's data dir before anything
// else: a member whose storage is damaged, or that lost its state and
// would bootstrap a second cluster, does not even listen.
func (c *Coordinator) openDataDir() error {
	cfg := c.cfg
	st, err := datadir.Open(datadir.Options{Dir: cfg.DataDir, NodeID: cfg.NodeID, CheckEntry: fsm.CheckEntry, Logger: cfg.Logger.Named("raft")})
	if err != nil {
		return err
	}
	for _, w := range st.Warnings {
		c.log.Warn(w)
	}
	if st.State == datadir.Lost && (cfg.Bootstrap || cfg.BootstrapExpect == 1) {
		st.Close()
		return fmt.Errorf("%w: %s has no Raft state but its identity file says it was member %s of cluster %s: bootstrapping would start a second cluster; start it with --join (and --bootstrap-expect) to rejoin its cluster; see %s",
			ErrWouldSplit, cfg.DataDir, st.Identity.NodeID, st.Identity.ClusterID, datadir.RunbookLostDisk)
	}
	if id := st.Identity; id != nil && id.Region != "" && id.Region != cfg.Region {
		st.Close()
		return fmt.Errorf("%w: %s holds the state of region %s (its identity file says so), and this member was started with --region %s: its ledger, rules and leases are %s's; start it with --region %s, or give a member of %s an empty --data-dir",
			ErrRegionChanged, cfg.DataDir, id.Region, cfg.Region, id.Region, id.Region, cfg.Region)
	}
	c.store, c.identity, c.startState = st, st.Identity, protoState(st.State)
	c.log.Info("data dir checked", "dir", cfg.DataDir, "state", st.State, "log_first", st.FirstIndex, "log_last", st.LastIndex, "snapshot", st.SnapshotIndex)
	return nil
}

// GRPCAddr is the address gRPC listens on.
func (c *Coordinator) GRPCAddr() string { return c.grpcLis.Addr().String() }

// AdvertisedGRPCAddr is the gRPC address other members and agents are
// given: GRPCAddr, or AdvertiseHost with its port.
func (c *Coordinator) AdvertisedGRPCAddr() string { return c.cfg.advertised(c.GRPCAddr()) }

// HTTPAddr is the address HTTP listens on, or "" when disabled.
func (c *Coordinator) HTTPAddr() string {
	if c.httpLis == nil {
		return ""
	}
	return c.httpLis.Addr().String()
}

// RaftAddr is the address of the Raft transport.
func (c *Coordinator) RaftAddr() string { return c.raftAddr }

// ID is this member's node ID.
func (c *Coordinator) ID() string { return c.cfg.NodeID }

// IsLeader reports whether this member leads and is ready to serve agents.
func (c *Coordinator) IsLeader() bool { return c.leading.Load() }

// Leader returns the current leader's ID and gRPC address, if known.
func (c *Coordinator) Leader() (id, grpcAddr string) {
	_, lid := c.raft.LeaderWithID()
	id = string(lid)
	if id == "" {
		return "", ""
	}
	c.fsm.Read(func(s *state.State) {
		if m := s.Member(id); m != nil {
			grpcAddr = m.GetGrpcAddress()
		}
	})
	return id, grpcAddr
}

// WaitLeader blocks until the cluster has a leader whose address is known
// and ready, or ctx ends.
func (c *Coordinator) WaitLeader(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if id, addr := c.Leader(); id != "" && addr != "" {
			if id != c.cfg.NodeID || c.leading.Load() {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("coordinator: waiting for a leader: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// now is the coordinator's clock.
func (c *Coordinator) now() time.Time { return c.cfg.Clock.Now() }

// apply proposes a command and waits for it to be committed and applied.
// Under a traced call (ctx holds a recording span), the wait is a child
// span of the call's, raft.apply, naming the command.
func (c *Coordinator) apply(ctx context.Context, t state.Command, m proto.Message, timeout time.Duration) (res any, err error) {
	if c.tracer != nil && trace.SpanFromContext(ctx).IsRecording() {
		_, span := c.tracer.Start(ctx, "raft.apply", trace.WithAttributes(tracing.Command.String(t.String())))
		defer func() {
			tracing.Fail(span, err)
			span.End()
		}()
	}
	if c.raft.State() != raft.Leader {
		return nil, ErrNotLeader
	}
	data, err := state.Encode(t, m)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	f := c.raft.Apply(data, timeout)
	if err := waitFuture(ctx, f); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return nil, ErrNotLeader
		}
		return nil, fmt.Errorf("coordinator: applying %v: %w", t, err)
	}
	c.metrics.applySeconds.Observe(time.Since(start).Seconds())
	if err, ok := f.Response().(error); ok {
		return nil, err
	}
	return f.Response(), nil
}

// waitFuture waits for a Raft future, or for ctx. Every wait on a future
// that goes through the log (an entry, a barrier, a membership change)
// goes through here: Raft answers such a future once its state machine
// goroutine has applied the entry, and that goroutine returns on shutdown
// leaving what was committed and not yet applied unanswered
// (hashicorp/raft v1.7.3, fsm.go's runFSM). Waited on bare, such futures
// held Close for nine minutes twice in make test: a new leader's
// maintenance entry (TestExportToPostgresExactlyOnce), then a new leader's
// catch-up barrier (TestLeaderGaugesResetOnStepDown, whose member closed
// just after leadership moved to it). Its wait is given up with ctx, the
// leader's term or the member's life; the goroutine left waiting ends if
// the future ever resolves.
func waitFuture(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Coordinator) applyReports(cmd *fsmpb.ReportsCommand) (*fsmpb.ReportsResult, error) {
	res, err := c.apply(c.ctx, state.CmdReports, cmd, 10*time.Second)
	if err != nil {
		return nil, err
	}
	return res.(*fsmpb.ReportsResult), nil
}

// currentRules returns the replicated rule set.
func (c *Coordinator) currentRules() *rules.Set {
	var set *rules.Set
	c.fsm.Read(func(s *state.State) { set = s.Rules() })
	return set
}

// onApplied observes every applied command, and the kind of the audit
// entry it recorded.
func (c *Coordinator) onApplied(t state.Command, audited string) {
	c.metrics.commands.WithLabelValues(t.String()).Inc()
	if audited != "" {
		c.metrics.auditEntries.WithLabelValues(audited).Inc()
	}
	if t == state.CmdRules {
		set := c.currentRules()
		c.metrics.rulesVersion.Set(float64(set.Version()))
		c.alloc.SetRules(set)
	}
}

// Close stops serving, leaves Raft running no longer, and closes the stores.
// It does not remove the member from the cluster (see ClusterService.Remove).
func (c *Coordinator) Close(ctx context.Context) error {
	if c.closed.Swap(true) {
		return nil
	}
	c.health.Shutdown()
	close(c.draining) // Envoy streams end, so that the gRPC server can stop
	if c.http != nil {
		_ = c.http.Shutdown(ctx)
	}
	stopped := make(chan struct{})
	go func() { c.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-ctx.Done():
		c.grpc.Stop()
	}
	return c.shutdown()
}

func (c *Coordinator) shutdown() error {
	c.closed.Store(true)
	c.cancel()
	c.leading.Store(false)
	var errs []error
	if c.raft != nil {
		if err := c.raft.Shutdown().Error(); err != nil {
			errs = append(errs, err)
		}
	}
	c.wg.Wait()
	if c.peers != nil {
		c.peers.close()
	}
	if c.sink != nil {
		c.sink.Close()
	}
	if c.gate != nil {
		errs = append(errs, c.gate.Close())
	} else if c.transport != nil {
		errs = append(errs, c.transport.Close())
	}
	if c.store != nil {
		errs = append(errs, c.store.Close())
	}
	if c.grpc != nil {
		c.grpc.Stop()
	}
	c.log.Info("coordinator stopped", "id", c.cfg.NodeID)
	return errors.Join(errs...)
}

// verifyLeader confirms leadership with two of Raft's VerifyLeader rounds
// in a row. One round counts any heartbeat answer that arrives while it
// waits, including one a follower sent before it stopped following this
// member, a few milliseconds earlier; TestDeposedLeaderDoesNotAnswer
// caught a leader answering on such stale evidence. A follower has one
// heartbeat in flight at a time, so the second round, started after the
// first ended, needs answers sent after the check began.
func (c *Coordinator) verifyLeader() error {
	if err := c.raft.VerifyLeader().Error(); err != nil {
		return err
	}
	return c.raft.VerifyLeader().Error()
}
