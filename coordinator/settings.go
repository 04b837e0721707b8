package coordinator

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/allot-io/allot/coordinator/allocator"
	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/coordinator/internal/fsm/state"
)

// configSettings are the settings a configuration asks for.
func configSettings(cfg *Config) allocator.Settings {
	return allocator.Settings{BillingWindow: cfg.BillingWindow, ReportInterval: cfg.ReportInterval, LeaseTTL: cfg.LeaseTTL}
}

// settings returns the cluster's settings, with this member's own for any
// not fixed yet (only until a leader has fixed them).
func (c *Coordinator) settings() allocator.Settings {
	var out allocator.Settings
	c.fsm.Read(func(s *state.State) { out = allocator.SettingsOr(s.Settings(), configSettings(&c.cfg)) })
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
func (c *Coordinator) warnSettings(last *allocator.Settings) {
	var cluster allocator.Settings
	var settled bool
	c.fsm.Read(func(s *state.State) {
		if settled = s.Settled(); settled {
			cluster = allocator.SettingsOr(s.Settings(), allocator.Settings{})
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
		{"billing_window", own.BillingWindow, cluster.BillingWindow},
		{"report_interval", own.ReportInterval, cluster.ReportInterval},
		{"lease_ttl", own.LeaseTTL, cluster.LeaseTTL},
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
func (c *Coordinator) roundInterval(set allocator.Settings) time.Duration {
	if c.roundEvery > 0 {
		return c.roundEvery
	}
	return allocator.DefaultRoundInterval(set.ReportInterval)
}
