package coordinator

import (
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"time"

	"github.com/allot-io/allot/internal/shard"

	"github.com/allot-io/allot/coordinator/allocator"
	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/allot-io/allot/internal/auth"
	"github.com/allot-io/allot/internal/clusterclient"
	"github.com/allot-io/allot/internal/timeutil"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
)

// Defaults for Config's zero fields.
const (
	DefaultReportInterval = allocator.DefaultReportInterval
	DefaultBillingWindow  = allocator.DefaultBillingWindow
	DefaultApplyWindow    = 20 * time.Millisecond
	DefaultAgentTimeout   = 15 * time.Minute
	DefaultMaxReportBytes = 8 << 20
	DefaultMaxReportKeys  = allocator.DefaultMaxReportKeys
	// DefaultLeaseIntervals is a lease's length in report intervals, when
	// LeaseTTL is not set; a new leader learns for as long.
	DefaultLeaseIntervals = allocator.DefaultLeaseIntervals
	// DefaultLedgerRetention keeps final billing windows for 35 days: a
	// monthly billing run, plus a few days for it to fall behind and be
	// re-run. docs/billing.md has the memory this costs.
	DefaultLedgerRetention = 35 * 24 * time.Hour
	// KeepLedger, or any negative LedgerRetention, keeps every final
	// window forever.
	KeepLedger time.Duration = -1
	// MaxUsageAge is how old a usage count's billing window may be when
	// the ledger keeps everything: a report with a count for an older
	// window is refused. With a retention, the retention bounds it.
	MaxUsageAge = allocator.MaxUsageAge
	// MaxClockAhead is how far ahead of the coordinator's clock a usage
	// count's billing window may start.
	MaxClockAhead = allocator.MaxClockAhead
	// MaxBillingWindow is the longest billing window; a window must also
	// divide a day evenly, so that windows align on every day.
	MaxBillingWindow = 24 * time.Hour
	// DefaultMaxNewNodesPerMinute is how many unknown node IDs may join
	// each minute by default: a fleet of a thousand gateways restarting
	// at once waits a minute at most.
	DefaultMaxNewNodesPerMinute = 1000
	// DefaultMaxReportsInFlight bounds the reports the leader takes at
	// once (Config.MaxReportsInFlight).
	DefaultMaxReportsInFlight = 512
	// DefaultMaxReportEntriesInFlight bounds the entries of the reports
	// the leader takes at once (Config.MaxReportEntriesInFlight): about
	// 250 MB of decoded reports.
	DefaultMaxReportEntriesInFlight = 1_000_000
	// DefaultAuditMaxEntries is how many audit entries are kept: at a few
	// hundred bytes each (at most 50 items of what changed each), tens of
	// MB at most in every member's memory and snapshots.
	DefaultAuditMaxEntries = state.DefaultAuditMaxEntries
	// DefaultMaxConnectionAge bounds how long a client connection lives.
	DefaultMaxConnectionAge = 30 * time.Minute
	// DefaultMaxConcurrentStreams bounds the calls in flight on one client
	// connection: a client's further calls wait for one to end.
	DefaultMaxConcurrentStreams = 256
	// DefaultParentInterval is how often a region's leader reports to its
	// parent: inter-region round trips are ~100 ms and lossy, so less
	// often than agents, and a lease there lasts DefaultLeaseIntervals of
	// the parent's own interval.
	DefaultParentInterval = 2 * time.Second
)

// ErrInvalidConfig is wrapped by every configuration error.
var ErrInvalidConfig = errors.New("coordinator: invalid configuration")

// Config configures one coordinator process.
type Config struct {
	// NodeID names this member; it must be unique in the cluster and stay
	// the same across restarts.
	NodeID string
	// DataDir holds the Raft log, stable store and snapshots.
	DataDir string
	// RaftAddr is where the Raft transport listens, host:port; port 0
	// picks a free one. It is also the address other members dial.
	RaftAddr string
	// GRPCAddr is where agents, operators and other members call.
	GRPCAddr string
	// HTTPAddr serves /metrics, /healthz, /readyz, /v1/status and
	// /v1/usage; empty disables it.
	HTTPAddr string
	// AdvertiseHost is the host (name or IP) other members and agents
	// dial, for listen addresses that bind every interface (0.0.0.0, ::,
	// or no host): such an address cannot be dialled as it is. Required
	// then; ignored for addresses with a host.
	AdvertiseHost string
	// Bootstrap makes this node a one-member cluster if it has no state
	// yet: for a deliberate cluster of one. A member whose data dir shows
	// it lost its state in a cluster refuses to (ErrWouldSplit). For a
	// cluster of several members, use BootstrapExpect on every member.
	Bootstrap bool
	// BootstrapExpect, with the same value and the gRPC addresses of all
	// the members in Join on every member, forms a new cluster once that
	// many fresh members have found each other and none already belongs
	// to one (docs/operations.md#deploying-a-3-member-cluster). A member
	// with state ignores it; a member that lost its state only rejoins.
	BootstrapExpect int
	// Join lists gRPC addresses of existing members to join through (with
	// BootstrapExpect: of all the members, this one included or not).
	Join []string
	// Region names the region this cluster serves; usage is recorded
	// under it.
	Region string
	// Parent lists gRPC addresses of the parent cluster this region's
	// cluster leases its part of every rule divided among regions from
	// (docs/regions.md); empty: it divides their static fractions.
	// ParentCredentials are what it presents there, as an agent does
	// (the agent role, for node region-<Region>); ParentInterval is how
	// often its leader reports (default DefaultParentInterval).
	Parent            []string
	ParentCredentials clusterclient.Credentials
	ParentInterval    time.Duration
	// Global makes this cluster a parent: its nodes are regions' clusters,
	// among which it divides every rule's whole limit.
	Global bool
	// Group names this cluster's shard group (docs/coordinator.md#shard-groups);
	// "" is shard.DefaultGroup. ShardHome lists the gRPC addresses of the
	// region's home group, on every group but the home: such a group
	// starts owning no slot, takes its rules from the home group, and
	// refuses rule writes.
	Group     string
	ShardHome []string
	// RulesFile, when set, is loaded and put as the whole rule set by the
	// leader when it differs from the replicated one.
	RulesFile string
	// AuthTokensFile names the bearer tokens this cluster accepts, each
	// with its role (agent, reader, admin) and, for agents, the nodes it
	// may report as (auth.ParseTokens has the format). It is re-read when
	// it changes.
	AuthTokensFile string
	// AdminToken, when set, is accepted as an admin's bearer token, in
	// addition to AuthTokensFile's.
	AdminToken string
	// TokenFile holds the bearer token this member presents to the others
	// when it joins; not needed when member certificates are used.
	TokenFile string
	// TLS configures TLS on gRPC, HTTP and the Raft transport. With a CA,
	// client certificates are verified and grant the role they name
	// (docs/security.md); the Raft transport takes member certificates
	// only.
	TLS TLSConfig
	// Insecure lets a coordinator without credentials (no tokens, no CA)
	// listen on addresses other than loopback, where anyone who reaches
	// it could write the ledger.
	Insecure bool
	// RaftPrivateNetwork states that the Raft address is reachable by
	// the members only (a private interface or a firewalled port): needed
	// for a non-loopback Raft address without mutual TLS, whose transport
	// authenticates nobody.
	RaftPrivateNetwork bool
	// MetricsNeedAuth makes /metrics need the reader role; /healthz and
	// /readyz are always open.
	MetricsNeedAuth bool
	// MaxNewNodesPerMinute bounds the node IDs never heard from before
	// that may join the fleet each minute (default
	// DefaultMaxNewNodesPerMinute; negative: unbounded), so that a flood
	// of invented nodes cannot dilute every real node's share.
	MaxNewNodesPerMinute int
	// MaxReportsInFlight bounds the reports the leader takes at once
	// (default DefaultMaxReportsInFlight; negative: unbounded). Past it, a
	// report is answered at once without being taken (shed): its agent
	// keeps the leases it holds, renewed, and sends its usage again. Early
	// reports are shed from half of it, or while allocation rounds overrun
	// their interval. Each report taken holds its decoded request and a
	// goroutine until answered: the bound is on the leader's memory and
	// queue, never on what a report may carry.
	MaxReportsInFlight int
	// MaxReportEntriesInFlight bounds the entries (key demands and usage
	// counts) of the reports the leader takes at once (default
	// DefaultMaxReportEntriesInFlight; negative: unbounded), shedding as
	// MaxReportsInFlight does: the report count alone does not bound the
	// leader's memory when each report carries thousands of keys. A report
	// alone is taken whatever its size (MaxReportKeys bounds that).
	MaxReportEntriesInFlight int
	// MaxUnitsPerSecond, when positive, bounds the units one node may
	// report per second of its report interval or billing window: a
	// tripwire for a compromised agent inflating a bill.
	MaxUnitsPerSecond float64
	// MaxConnectionAge closes client connections this old (default
	// DefaultMaxConnectionAge), so that a rotated CA or a revoked
	// certificate stops being accepted within it; clients reconnect.
	MaxConnectionAge time.Duration
	// MaxConcurrentStreams bounds the gRPC calls in flight on one client
	// connection (default DefaultMaxConcurrentStreams), each of which may
	// hold a message as large as its method takes while it is read.
	MaxConcurrentStreams int

	// ReportInterval is how often agents report; LeaseTTL how long a lease
	// holds (default 5 × ReportInterval); RoundInterval how often the
	// leader re-divides allowances (default a quarter of ReportInterval,
	// at most 250 ms: a report's answer may wait for the next round);
	// ApplyWindow how long reports are gathered into one Raft entry.
	ReportInterval time.Duration
	LeaseTTL       time.Duration
	RoundInterval  time.Duration
	ApplyWindow    time.Duration
	//
	// ReportInterval and LeaseTTL, like BillingWindow, are fixed by the
	// first leader of a cluster and replicated; a member configured
	// otherwise uses the cluster's and logs a warning.
	//
	// BillingWindow is the ledger's window (default one hour): whole
	// seconds, from 1s to 24h, dividing a day evenly.
	BillingWindow time.Duration
	// AgentTimeout is how long an agent may be silent before billing
	// windows stop waiting for it.
	AgentTimeout time.Duration
	// LedgerRetention deletes final ledger windows that ended longer ago
	// than this (default DefaultLedgerRetention; at least AgentTimeout).
	// Reports of usage in windows older than that are refused. A negative
	// value (KeepLedger) keeps every window, and accepts usage up to
	// MaxUsageAge old.
	LedgerRetention time.Duration
	// AuditMaxEntries is how many audit log entries the cluster keeps,
	// the newest (default DefaultAuditMaxEntries); AuditRetention, when
	// positive, also drops entries older than that. The leader's apply.
	AuditMaxEntries int
	AuditRetention  time.Duration
	// LedgerSink, a PostgreSQL DSN (postgres://…), makes the leader export
	// every final ledger line to that database exactly once and the
	// members drop what it holds (docs/billing.md). "" keeps the ledger
	// in the cluster alone. With a sink, LedgerRetention bounds how long
	// lines wait while the database is away: what it deletes unexported is
	// counted and logged.
	LedgerSink string
	// ExportBatch is how many lines one export transaction writes
	// (default DefaultExportBatch); ExportParallel how many of those
	// transactions may be in flight at once, committing in order
	// (DefaultExportParallel); ExportInterval how often the leader looks
	// for final lines when none wait (DefaultExportInterval);
	// ExportTimeout bounds each call to the database, one transaction
	// included (30s).
	ExportBatch    int
	ExportParallel int
	ExportInterval time.Duration
	ExportTimeout  time.Duration
	// NoticeWebhook, an http(s) URL, is where the leader posts each
	// threshold notice (docs/billing.md, "Threshold notices"), signed with
	// the secret in NoticeSecretFile (required with it: a file of the
	// service user's alone, not empty). "" delivers none; notices are
	// recorded all the same. NoticeTimeout bounds each post (default
	// 10s); NoticeBackoffMax the wait between failed attempts (default
	// DefaultNoticeBackoffMax).
	NoticeWebhook    string
	NoticeSecretFile string
	NoticeTimeout    time.Duration
	NoticeBackoffMax time.Duration
	// MaxReportBytes and MaxReportKeys bound one report.
	MaxReportBytes int
	MaxReportKeys  int

	// HeartbeatTimeout and ElectionTimeout tune Raft (default 1s each).
	// Tests on loopback use much shorter ones.
	HeartbeatTimeout time.Duration
	ElectionTimeout  time.Duration
	// SnapshotInterval and SnapshotThreshold tune Raft snapshots (defaults
	// 2 minutes and 8192 entries).
	SnapshotInterval  time.Duration
	SnapshotThreshold uint64

	// Logger receives the coordinator's and Raft's logs; nil discards.
	Logger hclog.Logger
	// Registerer receives the metrics; nil uses a registry of the
	// coordinator's own, served on /metrics.
	Registerer prometheus.Registerer
	// TracerProvider, when set, gives every gRPC call a server span (a
	// child of the traceparent it came with), the reports and the admin
	// calls their attributes, and each Raft apply under a traced call a
	// child span; calls forwarded to the leader carry the context on. nil
	// traces nothing.
	TracerProvider trace.TracerProvider
	// Clock is the time source of what the protocol schedules: the
	// leader's allocation rounds, ledger maintenance (billing windows,
	// retention, agent timeouts), exchanges with a parent cluster, RLQS
	// reports, and every timestamp the cluster records; nil is the system
	// clock. A timeutil.Manual runs those loops in virtual time. What
	// waits on Raft (elections, joins, applies, the batcher's window)
	// follows the system clock, as Raft itself does.
	Clock timeutil.TimeSource

	// noticeSecret is what NoticeSecretFile holds, read by withDefaults.
	noticeSecret []byte

	// hooks are this package's tests' (testHooks); nil otherwise.
	hooks *testHooks
}

// unspecifiedHost reports whether a listen address binds every interface.
func unspecifiedHost(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false // reported by the listener, with its own error
	}
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// authEnabled reports whether callers must prove who they are.
func (c *Config) authEnabled() bool {
	return c.AuthTokensFile != "" || c.AdminToken != "" || c.TLS.CAFile != ""
}

// exposed returns the first listen address that is not loopback, or "".
func (c *Config) exposed() string {
	for _, a := range []string{c.GRPCAddr, c.HTTPAddr, c.RaftAddr} {
		if a != "" && !isLoopback(a) {
			return a
		}
	}
	return ""
}

// isLoopback reports whether a listen address binds the loopback
// interface only.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && auth.IsLoopback(host)
}

// advertised is the address others dial for a listener at addr: addr, or
// AdvertiseHost with addr's port when addr binds every interface.
func (c *Config) advertised(addr string) string {
	if addr == "" || !unspecifiedHost(addr) || c.AdvertiseHost == "" {
		return addr
	}
	_, port, _ := net.SplitHostPort(addr)
	return net.JoinHostPort(c.AdvertiseHost, port)
}

// TLSConfig names the PEM files for TLS. With CAFile set, peers must
// present certificates signed by it (mutual TLS), and an agent's
// certificate must name the node it reports as.
type TLSConfig struct {
	CertFile string
	KeyFile  string
	CAFile   string
}

// Enabled reports whether TLS is configured.
func (t TLSConfig) Enabled() bool { return t.CertFile != "" }

func (c *Config) withDefaults() (Config, error) {
	cfg := *c
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...))
	}
	switch {
	case cfg.NodeID == "":
		return cfg, bad("NodeID", "is required")
	case cfg.DataDir == "":
		return cfg, bad("DataDir", "is required")
	case cfg.RaftAddr == "":
		return cfg, bad("RaftAddr", "is required")
	case cfg.GRPCAddr == "":
		return cfg, bad("GRPCAddr", "is required")
	case unspecifiedHost(cfg.RaftAddr) && cfg.AdvertiseHost == "":
		return cfg, bad("RaftAddr", "%s binds every interface; set AdvertiseHost to the host other members dial", cfg.RaftAddr)
	case unspecifiedHost(cfg.GRPCAddr) && cfg.AdvertiseHost == "":
		return cfg, bad("GRPCAddr", "%s binds every interface; set AdvertiseHost to the host agents and members dial", cfg.GRPCAddr)
	case unspecifiedHost(cfg.RaftAddr) && strings.HasSuffix(cfg.RaftAddr, ":0"):
		return cfg, bad("RaftAddr", "%s: advertising a host needs a fixed port", cfg.RaftAddr)
	case cfg.Bootstrap && len(cfg.Join) > 0:
		return cfg, bad("Join", "a bootstrapping node starts a new cluster; it cannot also join one (to form a cluster of several members, give each --bootstrap-expect N and --join with all of them)")
	case cfg.Bootstrap && cfg.BootstrapExpect > 0:
		return cfg, bad("BootstrapExpect", "--bootstrap starts a one-member cluster; --bootstrap-expect N forms one of N: give one of them")
	case cfg.BootstrapExpect < 0:
		return cfg, bad("BootstrapExpect", "must be 1 or more, got %d", cfg.BootstrapExpect)
	case cfg.BootstrapExpect > 1 && len(cfg.Join) == 0:
		return cfg, bad("Join", "--bootstrap-expect %d needs --join with the gRPC addresses of the members it forms the cluster with", cfg.BootstrapExpect)
	case cfg.TLS.CertFile != "" && cfg.TLS.KeyFile == "", cfg.TLS.KeyFile != "" && cfg.TLS.CertFile == "":
		return cfg, bad("TLS", "CertFile and KeyFile go together")
	case cfg.TLS.CAFile != "" && cfg.TLS.CertFile == "":
		return cfg, bad("TLS", "CAFile needs CertFile and KeyFile")
	case !cfg.authEnabled() && !cfg.Insecure && cfg.exposed() != "":
		return cfg, bad("Insecure", "%s is not a loopback address and no credential is configured: anyone who reaches it could write the ledger; configure tokens (--auth-tokens) or a client CA (--ca), or pass --insecure", cfg.exposed())
	case cfg.AuthTokensFile != "" && !cfg.TLS.Enabled() && !cfg.Insecure && !isLoopback(cfg.GRPCAddr):
		return cfg, bad("TLS", "%s is not a loopback address and bearer tokens would cross the network in the clear: configure a certificate (--cert, --key), or pass --insecure", cfg.GRPCAddr)
	case cfg.Group != "" && shard.ValidGroupID(cfg.Group) != nil:
		return cfg, bad("Group", "%v", shard.ValidGroupID(cfg.Group))
	case len(cfg.ShardHome) > 0 && cfg.Global:
		return cfg, bad("ShardHome", "a parent cluster (Global) is not split into shard groups: its nodes are regions, a few, not tenants")
	case len(cfg.ShardHome) > 0 && cfg.RulesFile != "":
		return cfg, bad("RulesFile", "a shard group that is not its region's home takes its rules from the home group; give the rules file to the home group")
	case cfg.Global && len(cfg.Parent) > 0:
		return cfg, bad("Parent", "a parent cluster (Global) leases from no parent: there is one tier between regions")
	case cfg.ParentInterval < 0 || cfg.ParentInterval > time.Minute:
		return cfg, bad("ParentInterval", "must be between 0 (%v) and 1m, got %v", DefaultParentInterval, cfg.ParentInterval)
	case cfg.TLS.CAFile == "" && !cfg.RaftPrivateNetwork && !cfg.Insecure && !isLoopback(cfg.RaftAddr):
		return cfg, bad("RaftAddr", "%s is not a loopback address and the Raft transport authenticates members only with mutual TLS (--ca); configure it, or pass --raft-private-network if only members can reach that address", cfg.RaftAddr)
	}
	for name, d := range map[string]time.Duration{
		"ReportInterval": cfg.ReportInterval, "LeaseTTL": cfg.LeaseTTL, "RoundInterval": cfg.RoundInterval,
		"ApplyWindow": cfg.ApplyWindow, "BillingWindow": cfg.BillingWindow, "AgentTimeout": cfg.AgentTimeout,
		"HeartbeatTimeout": cfg.HeartbeatTimeout, "MaxConnectionAge": cfg.MaxConnectionAge, "ElectionTimeout": cfg.ElectionTimeout, "SnapshotInterval": cfg.SnapshotInterval,
	} {
		if d < 0 {
			return cfg, bad(name, "must not be negative, got %v", d)
		}
	}
	if cfg.ReportInterval == 0 {
		cfg.ReportInterval = DefaultReportInterval
	}
	if cfg.ParentInterval == 0 {
		cfg.ParentInterval = DefaultParentInterval
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = DefaultLeaseIntervals * cfg.ReportInterval
	}
	if cfg.LeaseTTL < 2*cfg.ReportInterval {
		return cfg, bad("LeaseTTL", "%v is shorter than two report intervals (%v): leases would expire between reports", cfg.LeaseTTL, 2*cfg.ReportInterval)
	}
	if cfg.RoundInterval == 0 {
		cfg.RoundInterval = allocator.DefaultRoundInterval(cfg.ReportInterval)
	}
	if cfg.ApplyWindow == 0 {
		cfg.ApplyWindow = DefaultApplyWindow
	}
	if cfg.BillingWindow == 0 {
		cfg.BillingWindow = DefaultBillingWindow
	}
	if w := cfg.BillingWindow; w < time.Second || w > MaxBillingWindow || w%time.Second != 0 || MaxBillingWindow%w != 0 {
		return cfg, bad("BillingWindow", "must be whole seconds from 1s to 24h that divide a day evenly (1m, 5m, 15m, 1h, 6h, 24h…), got %v", w)
	}
	if cfg.AgentTimeout == 0 {
		cfg.AgentTimeout = DefaultAgentTimeout
	}
	if cfg.LedgerRetention == 0 {
		cfg.LedgerRetention = DefaultLedgerRetention
	}
	if cfg.LedgerRetention > 0 && cfg.LedgerRetention < cfg.AgentTimeout {
		return cfg, bad("LedgerRetention", "%v is shorter than AgentTimeout (%v): usage of an agent cut off for less than that would be refused; use a negative value to keep everything", cfg.LedgerRetention, cfg.AgentTimeout)
	}
	if cfg.AuditMaxEntries == 0 {
		cfg.AuditMaxEntries = DefaultAuditMaxEntries
	}
	if cfg.AuditMaxEntries < 0 || cfg.AuditRetention < 0 {
		return cfg, bad("AuditMaxEntries", "the audit log's bounds must not be negative (got %d entries, %v)", cfg.AuditMaxEntries, cfg.AuditRetention)
	}
	if cfg.ExportBatch == 0 {
		cfg.ExportBatch = DefaultExportBatch
	}
	if cfg.ExportParallel == 0 {
		cfg.ExportParallel = DefaultExportParallel
	}
	if cfg.ExportInterval == 0 {
		cfg.ExportInterval = DefaultExportInterval
	}
	if cfg.ExportTimeout == 0 {
		cfg.ExportTimeout = 30 * time.Second
	}
	if cfg.ExportBatch < 0 || cfg.ExportBatch > 1_000_000 || cfg.ExportInterval < 0 || cfg.ExportTimeout < 0 {
		return cfg, bad("ExportBatch", "must be from 1 to 1000000 lines, with a positive interval and timeout")
	}
	if cfg.ExportParallel < 0 || cfg.ExportParallel > maxExportParallel {
		return cfg, bad("ExportParallel", "must be from 1 to %d transactions", maxExportParallel)
	}
	if err := cfg.noticeDefaults(); err != nil {
		return cfg, err
	}
	if cfg.MaxReportBytes == 0 {
		cfg.MaxReportBytes = DefaultMaxReportBytes
	}
	if cfg.MaxReportsInFlight == 0 {
		cfg.MaxReportsInFlight = DefaultMaxReportsInFlight
	}
	if cfg.MaxReportEntriesInFlight == 0 {
		cfg.MaxReportEntriesInFlight = DefaultMaxReportEntriesInFlight
	}
	if cfg.MaxReportKeys == 0 {
		cfg.MaxReportKeys = DefaultMaxReportKeys
	}
	if cfg.MaxReportBytes < 0 || cfg.MaxReportKeys < 0 {
		return cfg, bad("MaxReportBytes", "limits must not be negative")
	}
	if cfg.MaxNewNodesPerMinute == 0 {
		cfg.MaxNewNodesPerMinute = DefaultMaxNewNodesPerMinute
	}
	if cfg.MaxConnectionAge == 0 {
		cfg.MaxConnectionAge = DefaultMaxConnectionAge
	}
	if cfg.MaxConcurrentStreams == 0 {
		cfg.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	if cfg.MaxConcurrentStreams < 0 {
		return cfg, bad("MaxConcurrentStreams", "must not be negative, got %d", cfg.MaxConcurrentStreams)
	}
	if !(cfg.MaxUnitsPerSecond >= 0) || math.IsInf(cfg.MaxUnitsPerSecond, 0) {
		return cfg, bad("MaxUnitsPerSecond", "must be a finite number, 0 or more, got %v", cfg.MaxUnitsPerSecond)
	}
	if cfg.HeartbeatTimeout == 0 {
		cfg.HeartbeatTimeout = time.Second
	}
	if cfg.ElectionTimeout == 0 {
		cfg.ElectionTimeout = time.Second
	}
	if cfg.SnapshotInterval == 0 {
		cfg.SnapshotInterval = 2 * time.Minute
	}
	if cfg.SnapshotThreshold == 0 {
		cfg.SnapshotThreshold = 8192
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	cfg.Clock = timeutil.Or(cfg.Clock)
	return cfg, nil
}

// testHooks let this package's tests reach into one member's machinery,
// to make a race or a failure happen when they choose rather than when
// timing allows. Config.hooks is nil outside tests, and every hook is
// optional.
type testHooks struct {
	// beforeApply runs before the state machine applies each log entry,
	// on Raft's apply goroutine: blocking it holds this member's replica
	// behind its log (a follower that lags).
	beforeApply func(*raft.Log)
	// openRequestTimeout, when set, replaces openRequestTimeout
	// (endpoint_limits.go).
	openRequestTimeout time.Duration
	// httpLimits, when set, changes the HTTP server's limits before it
	// serves (a test shortens them).
	httpLimits func(*httpLimits)
	// leadStep runs before each step of a new leader's preamble, named as
	// preamble names it; an error fails the step.
	leadStep func(step string) error
}

// reloader reads the TLS files, kept current as they change, or nil
// without TLS.
func (t TLSConfig) reloader(log hclog.Logger) (*auth.Reloader, error) {
	if !t.Enabled() {
		return nil, nil
	}
	r, err := auth.NewReloader(auth.TLSFiles{CertFile: t.CertFile, KeyFile: t.KeyFile, CAFile: t.CAFile}, func(err error) {
		log.Error("a changed TLS file could not be loaded", "error", err)
	})
	if err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
	return r, nil
}
