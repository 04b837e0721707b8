package coordinator

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/coordinator/internal/fsm/state"
	allotpb "github.com/allot-io/allot/proto"
)

// settings are what every member must agree on, replicated through
// SettingsCommand: the billing window cuts the ledger, and the report
// interval and lease TTL are what agents are told, what the allocator
// divides by, and how long a new leader learns. They are fixed from the
// configuration of the leader that first finds them unset (the cluster's
// first leader, or for a cluster from an older version, its first leader
// that knows them) and never change; a member whose flags differ uses the
// cluster's and says so once.
type settings struct {
	billingWindow, reportInterval, leaseTTL time.Duration
}

// configSettings are the settings a configuration asks for.
func configSettings(cfg *Config) settings {
	return settings{billingWindow: cfg.BillingWindow, reportInterval: cfg.ReportInterval, leaseTTL: cfg.LeaseTTL}
}

// settingsOr returns the replicated settings, each taken from def while
// not fixed yet.
func settingsOr(s *state.State, def settings) settings {
	fixed, out := s.Settings(), def
	if fixed.BillingWindow != 0 {
		out.billingWindow = fixed.BillingWindow
	}
	if fixed.ReportInterval != 0 {
		out.reportInterval = fixed.ReportInterval
	}
	if fixed.LeaseTTL != 0 {
		out.leaseTTL = fixed.LeaseTTL
	}
	return out
}

// settings returns the cluster's settings, with this member's own for any
// not fixed yet (only until a leader has fixed them).
func (c *Coordinator) settings() settings {
	var out settings
	c.fsm.Read(func(s *state.State) { out = settingsOr(s, configSettings(&c.cfg)) })
	return out
}

// fixSettings, on the leader, fixes from this member's configuration the
// settings that are not fixed yet.
func (c *Coordinator) fixSettings() error {
	var settled bool
	c.fsm.Read(func(s *state.State) { settled = s.Settled() })
	if settled {
		return nil
	}
	id, err := newClusterID()
	if err != nil {
		return err
	}
	_, err = c.apply(c.ctx, state.CmdSettings, &fsmpb.SettingsCommand{
		BillingWindowNano:  int64(c.cfg.BillingWindow),
		ReportIntervalNano: int64(c.cfg.ReportInterval),
		LeaseTtlNano:       int64(c.cfg.LeaseTTL),
		ClusterId:          id,
	}, 10*time.Second)
	if err != nil {
		return fmt.Errorf("coordinator: fixing the cluster's settings: %w", err)
	}
	return nil
}

// newClusterID is a random cluster ID: 16 bytes, in hex.
func newClusterID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("coordinator: a cluster ID: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// clusterID is the replicated cluster ID, "" until the first leader fixes it.
func (c *Coordinator) clusterID() (id string) {
	c.fsm.Read(func(s *state.State) { id = s.ClusterID() })
	return id
}

// warnSettings logs, once for each value the cluster's settings take,
// which of this member's flags they override. last is the value warned
// about before; the caller keeps it.
func (c *Coordinator) warnSettings(last *settings) {
	var cluster settings
	var settled bool
	c.fsm.Read(func(s *state.State) {
		if settled = s.Settled(); settled {
			cluster = settingsOr(s, settings{})
		}
	})
	if !settled || cluster == *last {
		return
	}
	*last = cluster
	own := configSettings(&c.cfg)
	var diffs []any
	for _, d := range []struct {
		flag        string
		mine, their time.Duration
	}{
		{"billing_window", own.billingWindow, cluster.billingWindow},
		{"report_interval", own.reportInterval, cluster.reportInterval},
		{"lease_ttl", own.leaseTTL, cluster.leaseTTL},
	} {
		if d.mine != d.their {
			diffs = append(diffs, d.flag, fmt.Sprintf("flag %v, cluster %v", d.mine, d.their))
		}
	}
	if len(diffs) > 0 {
		c.log.Warn("this member's settings differ from the cluster's; the cluster's win (they are fixed by its first leader)", diffs...)
	}
}

// roundInterval is how often the leader re-divides allowances: the
// configured RoundInterval, or a quarter of the cluster's report interval.
func (c *Coordinator) roundInterval(set settings) time.Duration {
	if c.roundEvery > 0 {
		return c.roundEvery
	}
	return defaultRoundInterval(set.reportInterval)
}

// defaultRoundInterval is the round interval a report interval has unless
// RoundInterval sets one: a quarter of it, at most 250 ms. A report whose
// pools changed waits for the next round for its answer (allocator.fold),
// so the round interval bounds that wait; each round costs the claims of
// the pools it divides, so four an interval keep an interval's work at
// four times what was reported.
func defaultRoundInterval(report time.Duration) time.Duration {
	return max(min(report/4, 250*time.Millisecond), time.Millisecond)
}

// reportLimits are the bounds a report must keep: at most MaxReportKeys
// entries, and usage in billing windows from what retention still keeps
// (or MaxUsageAge when the ledger keeps everything) up to MaxClockAhead
// after now.
func reportLimits(maxKeys int, maxUnits float64, retention, billingWindow time.Duration, now time.Time) allotpb.ReportLimits {
	age := retention
	if age <= 0 {
		age = MaxUsageAge
	}
	// A window whose end is within the retention is kept: its start may
	// be a window earlier.
	lo, hi := allotpb.WindowBounds(now, age+billingWindow, MaxClockAhead)
	return allotpb.ReportLimits{MaxKeys: maxKeys, MinWindowUnix: lo, MaxWindowUnix: hi,
		NowUnixNano: now.UnixNano(), MaxSkew: MaxClockAhead, MaxUnitsPerSecond: maxUnits, BillingWindow: billingWindow}
}
