package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// MemberStatus is the part of a coordinator's GET /v1/status the harness
// reads.
type MemberStatus struct {
	ID       string `json:"id"`
	State    string `json:"state"`
	LeaderID string `json:"leader_id"`
	// LeaderGRPC is the leader's gRPC address as this member knows it:
	// empty until the leader has registered it, and a follower forwards
	// nothing to the leader until then.
	LeaderGRPC   string `json:"leader_grpc_address"`
	Term         Uint64 `json:"term"`
	AppliedIndex Uint64 `json:"applied_index"`
	CommitIndex  Uint64 `json:"commit_index"`
	// ClusterID is fixed by the cluster's first leader, empty until then:
	// the cluster's rows in a ledger sink carry it.
	ClusterID string `json:"cluster_id"`
	// Ledger is what the member holds of the ledger, and how far its
	// state says the ledger sink has it: the last exported line's window
	// (RFC 3339), empty before the first batch.
	Ledger struct {
		Lines                 Uint64 `json:"lines"`
		Sink                  bool   `json:"sink"`
		ExportedLines         Uint64 `json:"exported_lines"`
		ExportedBatches       Uint64 `json:"exported_batches"`
		ExportedThroughWindow string `json:"exported_through_window"`
	} `json:"ledger"`
	Members []struct {
		ID    string `json:"id"`
		Voter bool   `json:"voter"`
	} `json:"members"`
}

// Voters counts the members the status lists as voters.
func (st *MemberStatus) Voters() int {
	n := 0
	for _, m := range st.Members {
		if m.Voter {
			n++
		}
	}
	return n
}

// Uint64 is a 64-bit integer as protobuf JSON writes it: a string, which
// a number also decodes into.
type Uint64 uint64

func (u *Uint64) UnmarshalJSON(b []byte) error {
	n, err := strconv.ParseUint(string(bytes.Trim(b, `"`)), 10, 64)
	if err != nil {
		return fmt.Errorf("a uint64, quoted or not: %w", err)
	}
	*u = Uint64(n)
	return nil
}

// Status is the member's own view, from its GET /v1/status.
func (c *Cluster) Status(ctx context.Context, co *Coordinator) (*MemberStatus, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, co.URL("/v1/status"), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s status: %w", co.ID, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s status: %s", co.ID, resp.Status)
	}
	var st MemberStatus
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&st); err != nil {
		return nil, fmt.Errorf("%s status: %w", co.ID, err)
	}
	return &st, nil
}

// ReportsAnswered is the reports a member has answered (its
// allot_coordinator_reports_total{result="ok"}).
func (c *Cluster) ReportsAnswered(ctx context.Context, co *Coordinator) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, co.URL("/metrics"), nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return 0, err
	}
	const series = `allot_coordinator_reports_total{result="ok"} `
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, nil
}

// Leader asks every running, unpaused member for its status and returns
// the member that says it leads at the highest term, with that status, or
// nil.
func (c *Cluster) Leader(ctx context.Context) (*Coordinator, *MemberStatus) {
	var best *Coordinator
	var bestStatus *MemberStatus
	for _, co := range c.Coords {
		if !co.Running() || co.IsPaused() {
			continue
		}
		st, err := c.Status(ctx, co)
		if err != nil || st.State != "Leader" {
			continue
		}
		if best == nil || st.Term > bestStatus.Term {
			best, bestStatus = co, st
		}
	}
	return best, bestStatus
}

// FindLeader is Leader's member and term.
func (c *Cluster) FindLeader(ctx context.Context) (*Coordinator, uint64) {
	co, st := c.Leader(ctx)
	if co == nil {
		return nil, 0
	}
	return co, uint64(st.Term)
}

// Follower is a running, unpaused member that answers and does not lead,
// or nil.
func (c *Cluster) Follower(ctx context.Context) *Coordinator {
	for _, co := range c.Coords {
		if !co.Running() || co.IsPaused() {
			continue
		}
		if st, err := c.Status(ctx, co); err == nil && st.State != "Leader" {
			return co
		}
	}
	return nil
}
