package coordinator

import (
	"github.com/allot-io/allot/coordinator/internal/state"
	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the coordinator's Prometheus metrics, all named
// allot_coordinator_* with their units in the name.
type metrics struct {
	raftState      *prometheus.GaugeVec
	leaderChanges  prometheus.Counter
	reports        *prometheus.CounterVec
	reportBytes    prometheus.Histogram
	reportKeys     prometheus.Histogram
	roundSeconds   prometheus.Histogram
	applySeconds   prometheus.Histogram
	activeKeys     prometheus.Gauge
	activeAgents   prometheus.Gauge
	leasesGranted  prometheus.Counter
	learning       prometheus.Gauge
	ledgerRecords  prometheus.Gauge
	commands       *prometheus.CounterVec
	rulesVersion   prometheus.Gauge
	adminRequests  *prometheus.CounterVec
	forwardedCalls prometheus.Counter
	authRefusals   *prometheus.CounterVec
	// openCallsRefused counts calls to open methods refused for too many
	// in flight (endpoint_limits.go).
	openCallsRefused prometheus.Counter
	newNodes         *prometheus.CounterVec
	rlqsStreams      prometheus.Gauge
	// Shard groups (internal/shardgroup): slots this group owns (leader only), and
	// on the home group's leader the moves under way and the age of the
	// oldest.
	slotsOwned     prometheus.Gauge
	movesActive    prometheus.Gauge
	moveOldest     prometheus.Gauge
	rlqsRequests   *prometheus.CounterVec
	rlqsAbandoned  *prometheus.CounterVec
	parentReports  *prometheus.CounterVec
	parentFallback prometheus.Gauge
	parentLeased   prometheus.Gauge
	// The ledger sink's export (leader_export.go); the gauges are the leader's,
	// 0 elsewhere.
	exportedLines prometheus.Counter
	exportSeconds prometheus.Histogram
	exportErrors  *prometheus.CounterVec
	exportPending prometheus.Gauge
	exportLag     prometheus.Gauge
	exportDropped prometheus.Counter
	// auditEntries counts the audit entries this member applied, on
	// every member alike (as commands): each replica records each
	// entry once.
	auditEntries *prometheus.CounterVec
	// Threshold notices (leader_notices.go): those waiting for the webhook
	// (leader only, 0 elsewhere), and the leader's attempts at delivering
	// them, by result.
	noticesPending   *prometheus.GaugeVec
	noticeDeliveries *prometheus.CounterVec
	// grpc counts and times every gRPC call by service, method and code
	// (grpc_server_*), from go-grpc-middleware's Prometheus provider.
	grpc *grpcprom.ServerMetrics
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		raftState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "allot_coordinator_raft_state", Help: "1 for this member's current Raft state (Follower, Candidate, Leader, Shutdown).",
		}, []string{"state"}),
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "allot_coordinator_leader_changes_total", Help: "Times this member saw the cluster's leader change.",
		}),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_coordinator_reports_total", Help: "Agent reports received, by result (ok, invalid, too_large, redirected, failed, forbidden, new_node_limit, moved, wrong_group, stale; shed: answered at once without being taken, the leader having MaxReportsInFlight under way, or an early report while rounds overran or from half of it).",
		}, []string{"result"}),
		reportBytes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "allot_coordinator_report_size_bytes", Help: "Size of agent reports.",
			Buckets: prometheus.ExponentialBuckets(128, 4, 10),
		}),
		reportKeys: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "allot_coordinator_report_keys", Help: "Keys with demand per agent report.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10),
		}),
		roundSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "allot_coordinator_allocation_round_duration_seconds", Help: "Time to re-divide the allowances that changed.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
		applySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "allot_coordinator_raft_apply_duration_seconds", Help: "Time from proposing a log entry to its commit and application.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		activeKeys: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "allot_coordinator_active_keys", Help: "Keys with at least one node holding or asking for a lease (leader only).",
		}),
		activeAgents: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "allot_coordinator_active_agents", Help: "Agents heard from within two lease periods (leader only).",
		}),
		leasesGranted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "allot_coordinator_leases_granted_total", Help: "Leases handed to agents.",
		}),
		learning: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "allot_coordinator_learning_mode", Help: "1 while a new leader learns: for one lease period it divides no more than the reporting nodes held.",
		}),
		ledgerRecords: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "allot_coordinator_ledger_records", Help: "Lines in the replicated usage ledger.",
		}),
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_coordinator_commands_applied_total", Help: "Raft log entries applied, by command.",
		}, []string{"command"}),
		rulesVersion: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "allot_coordinator_rules_version", Help: "Version of the replicated rule set.",
		}),
		adminRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_coordinator_admin_requests_total", Help: "Rule and cluster administration calls, by method and result.",
		}, []string{"method", "result"}),
		forwardedCalls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "allot_coordinator_forwarded_calls_total", Help: "Administrative writes this follower forwarded to the leader.",
		}),
		authRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_coordinator_auth_refusals_total",
			Help: "Calls refused for their credential, by method and reason (no_credential, bad_token, expired_certificate, wrong_role, wrong_node).",
		}, []string{"method", "reason"}),
		openCallsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "allot_coordinator_open_calls_refused_total",
			Help: "Calls to methods open to callers without a credential (health checks) refused because too many were in flight, when credentials are configured.",
		}),
		newNodes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_coordinator_new_nodes_total", Help: "Reports from node IDs never heard from before, by result (admitted; refused: over the per-minute bound, each retry counted).",
		}, []string{"result"}),
	}
	m.auditEntries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "allot_coordinator_audit_entries_total", Help: "Audit log entries this member applied, by kind (rules, overrides, membership, reset); every member counts each entry once.",
	}, []string{"kind"})
	for _, k := range state.AuditKinds {
		m.auditEntries.WithLabelValues(k)
	}
	m.newNodes.WithLabelValues("admitted")
	m.newNodes.WithLabelValues("refused")
	// Every known label value starts at 0, so that increase() sees the
	// first event too: an alert on the first invalid report fires.
	for _, r := range []string{"ok", "invalid", "too_large", "redirected", "failed", "forbidden", "new_node_limit", "moved", "wrong_group", "stale", "shed"} {
		m.reports.WithLabelValues(r)
	}
	for _, t := range state.Commands {
		m.commands.WithLabelValues(t.String())
	}
	for _, method := range []string{"PutRules", "DeleteRule", "PutOverrides", "DeleteOverrides", "ResetKeys", "Join", "Remove", "Backup", "Restore"} {
		for _, r := range []string{"ok", "invalid", "unavailable", "internal"} {
			m.adminRequests.WithLabelValues(method, r)
		}
	}
	m.rlqsStreams = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "allot_coordinator_rlqs_streams", Help: "Envoy RLQS streams open on this member; each is served as one node.",
	})
	m.rlqsRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "allot_coordinator_rlqs_requests_total", Help: "Requests Envoys reported over RLQS streams to this member, by result: allowed and denied (received), unmapped (under no rule of the cluster: not billed), refused (in a report the coordinators refused as invalid: not billed).",
	}, []string{"result"})
	for _, r := range []string{"allowed", "denied", "unmapped", "refused"} {
		m.rlqsRequests.WithLabelValues(r)
	}
	m.rlqsAbandoned = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "allot_coordinator_rlqs_buckets_abandoned_total", Help: "Buckets RLQS streams on this member told Envoy to abandon, by reason: idle (no usage for 10 minutes), rule_gone (its rule was deleted or no longer maps it).",
	}, []string{"reason"})
	for _, r := range []string{"idle", "rule_gone"} {
		m.rlqsAbandoned.WithLabelValues(r)
	}
	m.parentReports = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "allot_coordinator_parent_reports_total", Help: "A region leader's reports to its parent cluster, by result (ok, failed).",
	}, []string{"result"})
	for _, r := range []string{"ok", "failed"} {
		m.parentReports.WithLabelValues(r)
	}
	m.parentFallback = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "allot_coordinator_parent_fallback_keys", Help: "Keys divided among regions that this region's leader divides its static fraction of, holding no current lease from the parent (leader only; 0 elsewhere).",
	})
	m.parentLeased = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "allot_coordinator_parent_leased_keys", Help: "Keys divided among regions that this region's leader holds a current lease from the parent for (leader only; 0 elsewhere).",
	})
	m.exportedLines = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "allot_coordinator_ledger_exported_lines_total", Help: "Final ledger lines this member, as leader, committed to the ledger sink.",
	})
	m.exportSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "allot_coordinator_ledger_export_batch_duration_seconds", Help: "Time to write one batch of ledger lines to the sink, its transaction included.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 9),
	})
	m.exportErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "allot_coordinator_ledger_export_errors_total",
		Help: "Failed export rounds, by cause (unreachable, auth, read_only, disk_full, schema, timeout, position, behind, not_leader, canceled, other); each is retried.",
	}, []string{"cause"})
	for _, c := range []string{"unreachable", "auth", "read_only", "disk_full", "schema", "timeout", "position", "behind", "other"} {
		m.exportErrors.WithLabelValues(c)
	}
	m.noticesPending = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "allot_coordinator_notices_pending", Help: "Threshold notices recorded and not yet delivered, by target (webhook, sink) (leader with that target only; 0 elsewhere).",
	}, []string{"target"})
	m.noticeDeliveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "allot_coordinator_notice_deliveries_total",
		Help: "Threshold notices delivered, and failed attempts at delivering them, by target (webhook, sink) and result (delivered; rejected: the webhook answered but not with a 2xx, or redirected; failed: no answer, or the sink failed); each failure is retried.",
	}, []string{"target", "result"})
	for _, r := range []string{"delivered", "rejected", "failed"} {
		m.noticeDeliveries.WithLabelValues("webhook", r)
	}
	for _, r := range []string{"delivered", "failed"} {
		m.noticeDeliveries.WithLabelValues("sink", r)
	}
	m.exportPending = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "allot_coordinator_ledger_export_pending_lines", Help: "Final ledger lines waiting for the sink (leader with a sink only; 0 elsewhere).",
	})
	m.exportLag = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "allot_coordinator_ledger_export_lag_seconds", Help: "How long the oldest final window waiting for the sink has been over (leader with a sink only; 0 when nothing waits).",
	})
	m.exportDropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "allot_coordinator_ledger_export_dropped_lines_total", Help: "Final ledger lines retention deleted before the sink took them: usage lost to billing (leader with a sink only).",
	})
	m.slotsOwned = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "allot_coordinator_shard_slots_owned", Help: "Slots of the region's 16,384 this shard group owns (leader only; 0 elsewhere).",
	})
	m.movesActive = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "allot_coordinator_shard_moves_active", Help: "Slot moves under way (the home group's leader only; 0 elsewhere).",
	})
	m.moveOldest = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "allot_coordinator_shard_move_oldest_seconds", Help: "How long the oldest slot move under way has been going (the home group's leader only; 0 when none).",
	})
	reg.MustRegister(m.slotsOwned, m.movesActive, m.moveOldest)
	m.grpc = newGRPCMetrics()
	reg.MustRegister(m.exportedLines, m.exportSeconds, m.exportErrors, m.exportPending, m.exportLag, m.exportDropped, m.noticesPending, m.noticeDeliveries)
	reg.MustRegister(m.authRefusals, m.openCallsRefused, m.newNodes, m.rlqsStreams, m.rlqsRequests, m.rlqsAbandoned, m.parentReports, m.parentFallback, m.parentLeased, m.grpc)
	reg.MustRegister(m.raftState, m.leaderChanges, m.reports, m.reportBytes, m.reportKeys, m.roundSeconds,
		m.applySeconds, m.activeKeys, m.activeAgents, m.leasesGranted, m.learning, m.ledgerRecords,
		m.commands, m.rulesVersion, m.adminRequests, m.forwardedCalls, m.auditEntries)
	return m
}

// newGRPCMetrics are the gRPC server metrics, with a latency histogram
// whose buckets run from 100 µs (a report answered from memory) to 10 s
// (a backup page).
func newGRPCMetrics() *grpcprom.ServerMetrics {
	return grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(
		grpcprom.WithHistogramBuckets(prometheus.ExponentialBuckets(0.0001, 4, 9))))
}
