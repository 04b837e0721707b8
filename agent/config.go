package agent

import (
	"crypto/tls"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/allot-io/allot/rules"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
)

// ErrInvalidConfig is wrapped by every configuration error.
var ErrInvalidConfig = errors.New("agent: invalid configuration")

// Defaults for Config's zero fields.
const (
	DefaultReportInterval = time.Second
	DefaultMaxKeys        = 1 << 20
	DefaultMaxHotKeys     = 100_000
	DefaultMaxTenants     = 1 << 20
)

// Config configures an Agent.
type Config struct {
	// Coordinators are the gRPC addresses of the coordinator cluster's
	// members. Empty means standalone: the agent enforces Rules alone, each
	// node the whole limit, for tests and single-node use.
	Coordinators []string
	// NodeID names this gateway node; unique in the fleet.
	NodeID string
	// Region is where the node runs; usage is billed under it.
	Region string
	// Rules are static rules. When set they are enforced as given and the
	// coordinators' rules are ignored; when empty, rules are fetched from
	// the coordinators.
	Rules []rules.Rule
	// UntilRules is what a coordinated agent does until the cluster's
	// rules arrive (see UntilRules): the zero value, UntilRulesClosed,
	// refuses every request; UntilRulesOpen admits every one;
	// UntilRulesStatic enforces StartupRules. Not for static Rules,
	// which are enforced from the start.
	UntilRules UntilRules
	// StartupRules are the rules UntilRulesStatic enforces until the
	// cluster's arrive, locally (each node the whole limit, nothing
	// reported or billed, as a standalone agent).
	StartupRules []rules.Rule
	// RulesCacheFile, when set, keeps the cluster's last rules across
	// restarts: written (atomically) whenever they change, and read by
	// New, which enforces them until the cluster's arrive, before
	// UntilRules is considered. A missing file is the first start; an
	// unreadable one is logged at ERROR and replaced once the cluster's
	// rules arrive. Give each agent on a host its own file.
	RulesCacheFile string
	// ReportInterval is how often usage is reported (default 1s); the
	// coordinators' setting takes over once they answer.
	ReportInterval time.Duration
	// MaxKeys bounds the keys each rule holds for each limit (default
	// 1,048,576). At the bound, a capacity rule evicts the key closest to
	// rest, a quota rule admits new keys untracked (fails open), and an
	// abuse rule refuses new keys (fails closed); all are counted.
	MaxKeys int
	// IdleTTL keeps a key that has returned to rest this long before it
	// is removed (default 0: removed at rest; nothing is lost either way).
	IdleTTL time.Duration
	// MaxHotKeys bounds the keys holding leases (default 100,000).
	MaxHotKeys int
	// MaxTenants bounds the tenants whose usage is counted separately;
	// beyond it usage is counted under the empty tenant (default
	// 1,048,576).
	MaxTenants int

	// ReservationTTL is how long a reservation (Reserve) waits to be
	// settled before it is settled at its estimate (default 10 minutes);
	// MaxReservations bounds the open ones, past which the oldest is
	// settled at its estimate (default 100,000); a settled one is let go
	// at once, so that they bound what reservations hold in memory.
	ReservationTTL  time.Duration
	MaxReservations int

	// Transport, when set, carries reports instead of a gRPC connection to
	// Coordinators (an in-process coordinator, tests, custom transports).
	Transport Transport

	// TLS, when set, is used to reach the coordinators as it is; with a
	// client certificate, it must name NodeID. CAFile, CertFile and
	// KeyFile are the alternative that follows rotation: the files are
	// re-read when they change.
	TLS *tls.Config
	// CAFile verifies the coordinators' certificates (TLS without it
	// verifies against the system's roots); CertFile and KeyFile are the
	// agent's client certificate, for mutual TLS.
	CAFile, CertFile, KeyFile string
	// TokenFile holds the agent's bearer token, bound to its NodeID by
	// the coordinators; re-read when it changes. It is sent only over TLS
	// or to a loopback address.
	TokenFile string
	// DialOptions are added to every coordinator connection.
	DialOptions []grpc.DialOption

	// CloseTimeout bounds Close when its context has no deadline
	// (default DefaultCloseTimeout, 10s): a gateway shutting down while no
	// coordinator answers is never held up for longer.
	CloseTimeout time.Duration

	// Logger receives the agent's logs; nil discards them.
	Logger hclog.Logger
	// Registerer receives the agent's metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	// TracerProvider, when set, traces the agent's reports (a client span
	// each, its context sent to the coordinators so that theirs are its
	// children) and gives the servers around it (the sidecar) their
	// tracer; nil traces nothing and costs nothing.
	TracerProvider trace.TracerProvider
	// Clock is the time source; nil reads the system clock every
	// millisecond in the background.
	Clock Clock
}

func (c *Config) withDefaults() (Config, error) {
	cfg := *c
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...))
	}
	if cfg.coordinated() && cfg.NodeID == "" {
		return cfg, bad("NodeID", "is required to report to coordinators")
	}
	if len(cfg.NodeID) > 256 || len(cfg.Region) > 256 || !utf8.ValidString(cfg.NodeID) || !utf8.ValidString(cfg.Region) {
		return cfg, bad("NodeID", "NodeID and Region must be valid UTF-8 of at most 256 bytes")
	}
	if !cfg.coordinated() && len(cfg.Rules) == 0 {
		return cfg, bad("Rules", "a standalone agent (no Coordinators) needs static Rules")
	}
	if err := cfg.checkUntilRules(); err != nil {
		return cfg, err
	}
	if cfg.TLS != nil && (cfg.CAFile != "" || cfg.CertFile != "") {
		return cfg, bad("TLS", "give either TLS or CAFile/CertFile/KeyFile, not both")
	}
	if (cfg.CertFile == "") != (cfg.KeyFile == "") {
		return cfg, bad("CertFile", "CertFile and KeyFile go together")
	}
	for name, v := range map[string]int{"MaxKeys": cfg.MaxKeys, "MaxHotKeys": cfg.MaxHotKeys, "MaxTenants": cfg.MaxTenants} {
		if v < 0 {
			return cfg, bad(name, "must not be negative, got %d", v)
		}
	}
	if cfg.ReportInterval < 0 || (cfg.ReportInterval > 0 && cfg.ReportInterval < 10*time.Millisecond) {
		return cfg, bad("ReportInterval", "must be at least 10ms, got %v", cfg.ReportInterval)
	}
	if cfg.CloseTimeout < 0 {
		return cfg, bad("CloseTimeout", "must not be negative, got %v", cfg.CloseTimeout)
	}
	if cfg.CloseTimeout == 0 {
		cfg.CloseTimeout = DefaultCloseTimeout
	}
	if cfg.IdleTTL < 0 {
		return cfg, bad("IdleTTL", "must not be negative, got %v", cfg.IdleTTL)
	}
	if cfg.ReportInterval == 0 {
		cfg.ReportInterval = DefaultReportInterval
	}
	if cfg.MaxKeys == 0 {
		cfg.MaxKeys = DefaultMaxKeys
	}
	if cfg.MaxHotKeys == 0 {
		cfg.MaxHotKeys = DefaultMaxHotKeys
	}
	if cfg.MaxTenants == 0 {
		cfg.MaxTenants = DefaultMaxTenants
	}
	if cfg.ReservationTTL < 0 || cfg.MaxReservations < 0 {
		return cfg, fmt.Errorf("agent: ReservationTTL and MaxReservations must not be negative, got %v and %d", cfg.ReservationTTL, cfg.MaxReservations)
	}
	if cfg.ReservationTTL == 0 {
		cfg.ReservationTTL = DefaultReservationTTL
	}
	if cfg.MaxReservations == 0 {
		cfg.MaxReservations = DefaultMaxReservations
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	return cfg, nil
}

// coordinated reports whether the agent reports to coordinators.
func (c *Config) coordinated() bool { return len(c.Coordinators) > 0 || c.Transport != nil }

// checkUntilRules checks the start-up policy against the rest: it is for
// agents that take their rules from the coordinators.
func (c *Config) checkUntilRules() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...))
	}
	switch {
	case c.UntilRules > UntilRulesStatic:
		return bad("UntilRules", "unknown policy %d (want UntilRulesClosed, UntilRulesOpen or UntilRulesStatic)", c.UntilRules)
	case c.UntilRules == UntilRulesStatic && len(c.StartupRules) == 0:
		return bad("StartupRules", "UntilRulesStatic needs the rules to enforce until the cluster's arrive")
	case c.UntilRules != UntilRulesStatic && len(c.StartupRules) > 0:
		return bad("StartupRules", "are enforced only with UntilRules UntilRulesStatic, got %v", c.UntilRules)
	case len(c.Rules) > 0 && c.UntilRules != UntilRulesClosed:
		return bad("UntilRules", "static Rules are enforced from the start: there is no time until rules")
	case len(c.Rules) > 0 && c.RulesCacheFile != "":
		return bad("RulesCacheFile", "caches the cluster's rules; static Rules are enforced instead of them")
	case !c.coordinated() && c.RulesCacheFile != "":
		return bad("RulesCacheFile", "caches the coordinators' rules; a standalone agent has none")
	}
	return nil
}
