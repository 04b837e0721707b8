package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/allot-io/allot/coordinator"
	"github.com/allot-io/allot/coordinator/datadir"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

const coordinatorAbout = `
Runs one member of the coordinator cluster. To form a new cluster of N
members, start every one of them with the same --bootstrap-expect N and
--join listing all N gRPC addresses: they form the cluster once all N have
found each other fresh, and a member that later loses its disk rejoins
rather than starting a second cluster. --bootstrap starts a deliberate
one-member cluster. To add a member to a running cluster, start it with
--join pointing at any member: it joins without a vote and becomes a voter
once it has caught up. Members keep their Raft log, snapshots and identity
in --data-dir and must keep the same --node-id across restarts.`

func coordinatorCommand() *Command {
	return &Command{
		Name: "coordinator", Usage: "--node-id ID --data-dir DIR [--bootstrap-expect N --join ADDRS | --join ADDRS | --bootstrap] [flags]",
		Short: "run a coordinator cluster member",
		Long:  coordinatorAbout,
		Flags: func(f *flags) runFunc { return runOptions(f, &coordinatorOptions{}) },
	}
}

// coordinatorOptions are allot coordinator's flags: the member's Config,
// and the flags that fill parts of it (address lists, credentials, the
// sink's DSN from a file).
type coordinatorOptions struct {
	cfg                     coordinator.Config
	join, parent, shardHome string
	sinkFile                string
	creds                   credFlags
	log                     logFlags
	trace                   traceFlags
}

func (o *coordinatorOptions) register(f *flags) {
	f.StringVar(&o.cfg.NodeID, "node-id", "", "this member's name, unique and stable across restarts (required)")
	f.StringVar(&o.cfg.DataDir, "data-dir", "", "directory for the Raft log, stable store and snapshots (required)")
	f.StringVar(&o.cfg.RaftAddr, "raft-addr", "127.0.0.1:7300", "Raft transport address, host:port")
	f.StringVar(&o.cfg.GRPCAddr, "grpc-addr", "127.0.0.1:7400", "gRPC address for agents, operators and other members")
	f.StringVar(&o.cfg.HTTPAddr, "http-addr", "127.0.0.1:7500", "HTTP address for /metrics, /healthz, /readyz, /v1/status, /v1/usage (empty: off)")
	f.StringVar(&o.cfg.AdvertiseHost, "advertise-host", "", "host other members and agents dial, required when an address binds every interface (0.0.0.0)")
	f.BoolVar(&o.cfg.Bootstrap, "bootstrap", false, "start a new one-member cluster with this member, if it has no state yet (for several members, use --bootstrap-expect)")
	f.IntVar(&o.cfg.BootstrapExpect, "bootstrap-expect", 0, "form a new cluster of this many members once they have all found each other fresh through --join (give every member the same value and the same --join list)")
	f.StringVar(&o.join, "join", "", "gRPC addresses of the members to join through (with --bootstrap-expect: of all the members), comma-separated")
	f.StringVar(&o.cfg.Region, "region", "default", "the region this cluster serves; usage is recorded under it")
	f.StringVar(&o.parent, "parent", "", "gRPC addresses of the parent cluster, comma-separated: lease this region's part of every rule divided among regions from it, by demand (docs/regions.md); empty: divide the static fractions")
	f.DurationVar(&o.cfg.ParentInterval, "parent-interval", coordinator.DefaultParentInterval, "how often the leader reports to --parent")
	f.StringVar(&o.cfg.ParentCredentials.CAFile, "parent-ca", "", "PEM CA that signed the parent's certificates (TLS to --parent)")
	f.StringVar(&o.cfg.ParentCredentials.CertFile, "parent-cert", "", "PEM client certificate presented to --parent (agent role, node region-<region>)")
	f.StringVar(&o.cfg.ParentCredentials.KeyFile, "parent-key", "", "PEM private key of --parent-cert")
	f.StringVar(&o.cfg.ParentCredentials.TokenFile, "parent-token-file", "", "file holding the bearer token presented to --parent (agent role, node region-<region>)")
	f.StringVar(&o.cfg.Group, "group", "", "this cluster's shard group ID (docs/coordinator.md#shard-groups); default \"main\", the region's home group")
	f.StringVar(&o.shardHome, "shard-home", "", "gRPC addresses of the region's home shard group, comma-separated: this cluster is another group of the region; it starts owning no slot, takes its rules from the home group and refuses rule writes")
	f.BoolVar(&o.cfg.Global, "global", false, "this cluster is the parent of regions' clusters: it divides every rule's whole limit among the regions that report to it")
	f.StringVar(&o.cfg.RulesFile, "rules", "", "rules file the leader installs when it differs from the replicated rules")
	f.StringVar(&o.cfg.AuthTokensFile, "auth-tokens", "", "tokens file: the bearer tokens accepted, with their roles (docs/security.md); re-read when it changes")
	f.StringVar(&o.cfg.AdminToken, "admin-token", "", "one admin bearer token accepted besides --auth-tokens; a value shows in ps and shell history: prefer an admin entry in the --auth-tokens file (or ALLOT_ADMIN_TOKEN)")
	f.BoolVar(&o.cfg.Insecure, "insecure", false, "allow listening beyond loopback with no credential configured: anyone who reaches it may write the ledger")
	f.BoolVar(&o.cfg.RaftPrivateNetwork, "raft-private-network", false, "the --raft-addr is reachable by members only; needed for a non-loopback Raft address without mutual TLS (--ca)")
	f.BoolVar(&o.cfg.MetricsNeedAuth, "metrics-auth", false, "/metrics needs the reader role too (health endpoints stay open)")
	f.IntVar(&o.cfg.MaxNewNodesPerMinute, "max-new-nodes-per-minute", coordinator.DefaultMaxNewNodesPerMinute, "node IDs never heard from before that may join each minute (negative: unbounded)")
	f.IntVar(&o.cfg.MaxReportsInFlight, "max-reports-in-flight", coordinator.DefaultMaxReportsInFlight, "reports the leader takes at once; past it (early reports from half of it) a report is answered at once, shed: the agent keeps its leases and sends its usage again (negative: unbounded)")
	f.IntVar(&o.cfg.MaxReportEntriesInFlight, "max-report-entries-in-flight", coordinator.DefaultMaxReportEntriesInFlight, "key demands and usage counts of the reports the leader takes at once (about 250 bytes each in memory); past it a report is shed as past --max-reports-in-flight, a report alone is always taken (negative: unbounded)")
	f.Float64Var(&o.cfg.MaxUnitsPerSecond, "max-units-per-second", 0, "refuse a usage line or key demand above this many units per second of its billing window or report interval (0: only the protocol's 2^53 bound)")
	f.DurationVar(&o.cfg.MaxConnectionAge, "max-connection-age", coordinator.DefaultMaxConnectionAge, "close client connections this old, so rotated CAs take effect; clients reconnect")
	f.IntVar(&o.cfg.MaxConcurrentStreams, "max-concurrent-streams", coordinator.DefaultMaxConcurrentStreams, "gRPC calls in flight on one client connection; a client's further calls wait (docs/security.md#what-a-caller-can-cost)")
	f.DurationVar(&o.cfg.ReportInterval, "report-interval", coordinator.DefaultReportInterval, "how often agents report; fixed by a cluster's first leader, later values are ignored with a warning")
	f.DurationVar(&o.cfg.LeaseTTL, "lease-ttl", 0, "how long a lease holds (default 5 × report interval); fixed by a cluster's first leader")
	f.DurationVar(&o.cfg.BillingWindow, "billing-window", coordinator.DefaultBillingWindow, "the ledger's window: whole seconds from 1s to 24h dividing a day (e.g. 1m, 15m, 1h, 24h); fixed by a cluster's first leader")
	f.DurationVar(&o.cfg.AgentTimeout, "agent-timeout", coordinator.DefaultAgentTimeout, "how long billing windows wait for a silent agent before they are final")
	f.DurationVar(&o.cfg.LedgerRetention, "ledger-retention", coordinator.DefaultLedgerRetention, "delete final ledger windows older than this (at least --agent-timeout; negative keeps everything; see docs/billing.md for the memory it costs)")
	f.IntVar(&o.cfg.AuditMaxEntries, "audit-max-entries", coordinator.DefaultAuditMaxEntries, "audit log entries the cluster keeps, the newest (docs/operations.md#audit-log)")
	f.DurationVar(&o.cfg.AuditRetention, "audit-retention", 0, "also drop audit log entries older than this (0: by --audit-max-entries only)")
	f.StringVar(&o.cfg.LedgerSink, "ledger-sink", "", "PostgreSQL DSN (postgres://user@host/db): export every final ledger line to it exactly once and keep only what it has not taken (docs/billing.md); a password here shows in ps: prefer --ledger-sink-file")
	f.StringVar(&o.sinkFile, "ledger-sink-file", "", "file holding the --ledger-sink DSN, for one with a password")
	f.IntVar(&o.cfg.ExportBatch, "ledger-export-batch", coordinator.DefaultExportBatch, "ledger lines written to the sink per transaction")
	f.IntVar(&o.cfg.ExportParallel, "ledger-export-parallel", coordinator.DefaultExportParallel, "export transactions in flight at once; they commit in order (docs/billing.md#export-speed)")
	f.DurationVar(&o.cfg.ExportInterval, "ledger-export-interval", coordinator.DefaultExportInterval, "how often the leader looks for final lines to export when none wait")
	f.StringVar(&o.cfg.NoticeWebhook, "notice-webhook", "", "http(s) URL the leader posts each threshold notice to, signed with --notice-secret-file (docs/billing.md#threshold-notices)")
	f.StringVar(&o.cfg.NoticeSecretFile, "notice-secret-file", "", "file holding the secret --notice-webhook posts are signed with (HMAC-SHA256); the service user's alone, not empty")
	f.DurationVar(&o.cfg.NoticeTimeout, "notice-timeout", coordinator.DefaultNoticeTimeout, "how long one post to --notice-webhook may take before it is retried")
	f.DurationVar(&o.cfg.NoticeBackoffMax, "notice-backoff-max", coordinator.DefaultNoticeBackoffMax, "the longest wait between failed posts to --notice-webhook (the wait doubles from 0.5s, with jitter)")
	f.Uint64Var(&o.cfg.SnapshotThreshold, "snapshot-threshold", 8192, "Raft log entries between snapshots (Raft keeps at least 1024 entries behind the newest snapshot)")
	f.DurationVar(&o.cfg.SnapshotInterval, "snapshot-interval", 2*time.Minute, "how often Raft checks whether a snapshot is due")
	f.IntVar(&o.cfg.MaxReportBytes, "max-report-bytes", coordinator.DefaultMaxReportBytes, "refuse agent reports larger than this")
	f.IntVar(&o.cfg.MaxReportKeys, "max-report-keys", coordinator.DefaultMaxReportKeys, "refuse agent reports with more keys than this")
	o.log.register(f)
	o.creds.registerServing(f)
	o.trace.register(f)
}

// validate checks what the flags say alone; coordinator.New checks the
// Config they make as a whole.
func (o *coordinatorOptions) validate() error {
	if o.cfg.NodeID == "" || o.cfg.DataDir == "" {
		return usagef("coordinator", "--node-id and --data-dir are required")
	}
	if err := o.log.validate("coordinator"); err != nil {
		return err
	}
	if o.sinkFile != "" && o.cfg.LedgerSink != "" {
		return usagef("coordinator", "give --ledger-sink or --ledger-sink-file, not both")
	}
	return nil
}

// run starts the member and serves until ctx ends or the member cannot go
// on; a member that must not run as it is ends with exitRefused.
func (o *coordinatorOptions) run(ctx context.Context, e *env, f *flags) error {
	cfg := o.cfg
	logger, err := o.log.logger("coordinator", "allot", e.stderr)
	if err != nil {
		return err
	}
	warnExposedSecrets(logger, secretFile{"ledger-sink-file", o.sinkFile}, secretFile{"auth-tokens", cfg.AuthTokensFile},
		secretFile{"token-file", o.creds.tokenFile}, secretFile{"key", o.creds.key},
		secretFile{"parent-token-file", cfg.ParentCredentials.TokenFile}, secretFile{"parent-key", cfg.ParentCredentials.KeyFile})
	if o.sinkFile != "" {
		if cfg.LedgerSink, err = readSinkFile(o.sinkFile); err != nil {
			return usagef("coordinator", "--ledger-sink-file: %v", err)
		}
	}
	cfg.Join = splitList(o.join)
	cfg.Parent = splitList(o.parent)
	cfg.ShardHome = splitList(o.shardHome)
	cfg.TLS = coordinator.TLSConfig{CertFile: o.creds.cert, KeyFile: o.creds.key, CAFile: o.creds.ca}
	cfg.TokenFile = o.creds.tokenFile
	cfg.Logger = logger
	// The coordinator's metrics, with the Go runtime's, the process's and
	// the build's, on its /metrics.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfoGauge())
	cfg.Registerer = reg
	tp, err := o.trace.provider(ctx, "coordinator", "allot-coordinator", cfg.NodeID, cfg.Region, logger.Named("tracing"))
	if err != nil {
		return err
	}
	// Flushed last, once the member has stopped serving.
	defer flushTraces(tp, logger)
	cfg.TracerProvider = tp.TracerProviderOrNil()
	c, err := coordinator.New(cfg)
	if errors.Is(err, coordinator.ErrInvalidConfig) {
		return usagef("coordinator", "%v%s", err, f.notOnCommandLine())
	}
	var de *datadir.Error
	if errors.As(err, &de) || errors.Is(err, coordinator.ErrWouldSplit) || errors.Is(err, coordinator.ErrRegionChanged) {
		return &refusedError{err} // one line naming the file, the problem and the runbook
	}
	if err != nil {
		return fmt.Errorf("starting: %w", err)
	}
	cfg.Logger.Info("coordinator running", "node", cfg.NodeID, "grpc", c.AdvertisedGRPCAddr(), "raft", c.RaftAddr(), "http", c.HTTPAddr())
	select {
	case <-ctx.Done():
		cfg.Logger.Info("shutting down")
	case <-c.Failed():
		cfg.Logger.Error("stopping: this member cannot go on", "error", c.Err())
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Close(closeCtx); err != nil {
		return err
	}
	if err := c.Err(); err != nil {
		return &refusedError{err}
	}
	return nil
}

// readSinkFile reads a DSN from the first non-empty line of a file.
func readSinkFile(path string) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			return line, nil
		}
	}
	return "", fmt.Errorf("%s holds no DSN", path)
}
