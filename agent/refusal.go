package agent

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Causes of a ReportRefusal.
const (
	// RefusedUnauthenticated: the coordinators accept no credential the
	// agent presents (none, an unknown or expired token or certificate).
	RefusedUnauthenticated = "unauthenticated"
	// RefusedWrongNode: the credential does not name the agent's node ID
	// or region.
	RefusedWrongNode = "wrong_node"
	// RefusedWrongRole: the credential is not an agent's.
	RefusedWrongRole = "wrong_role"
)

// ReportRefusal is why the coordinators refuse the agent's reports, and
// how to fix it: such an agent bills nobody and, until it has had the
// cluster's rules, follows its Config.UntilRules.
type ReportRefusal struct {
	Cause string `json:"cause"`
	// Error is the coordinators' answer.
	Error string `json:"error"`
	Fix   string `json:"fix"`
	// Since is when the first report was refused for this cause.
	Since time.Time `json:"since"`
}

// refusalLogEvery is how often a refusal, or a start-up without rules
// that goes on, is logged at ERROR, per cause.
const refusalLogEvery = time.Minute

// reportWatch is what the reporter keeps about reports that fail, for
// logs and Status, and about the rules cache it writes.
type reportWatch struct {
	refusal   atomic.Pointer[ReportRefusal]
	lastError atomic.Pointer[string]
	logged    map[string]int64 // cause → when last logged at ERROR, ns

	cached      *allotpb.RuleSet // the cluster's set last cached
	cachedAt    time.Time
	cachedNodes int64
	cacheStale  bool // the last write failed
}

// refusalOf tells a report refused for the agent's credential from one
// that failed otherwise, and says what to fix.
func (a *Agent) refusalOf(err error) (ReportRefusal, bool) {
	st, ok := status.FromError(err)
	if !ok {
		return ReportRefusal{}, false
	}
	node, region := a.cfg.NodeID, a.cfg.Region
	switch {
	case st.Code() == codes.Unauthenticated:
		return ReportRefusal{Cause: RefusedUnauthenticated, Error: st.Message(),
			Fix: "the coordinators accept no credential this agent presents: the token file (TokenFile, --token-file) must hold a token of their --auth-tokens, " +
				"or the certificate (CertFile, --cert) be signed by their --ca and unexpired; a token is sent only over TLS (CAFile, --ca) or to a loopback address"}, true
	case st.Code() == codes.PermissionDenied && strings.Contains(st.Message(), "role"):
		return ReportRefusal{Cause: RefusedWrongRole, Error: st.Message(),
			Fix: fmt.Sprintf("the credential is not an agent's: issue one with allot token --role agent --nodes %q --regions %q", node, region)}, true
	case st.Code() == codes.PermissionDenied:
		return ReportRefusal{Cause: RefusedWrongNode, Error: st.Message(),
			Fix: fmt.Sprintf("the credential does not name this node: a token's nodes pattern must match --node-id (NodeID) %q, and its regions pattern, if it has one, --region (Region) %q "+
				"(allot token --role agent --nodes %q); a certificate must name %q", node, region, node, node)}, true
	}
	return ReportRefusal{}, false
}

// refused records a failed report for Status, and logs at ERROR, at most
// once a minute per cause, a report refused for the agent's credential,
// and reports failing while the agent does not have the cluster's rules.
func (r *reporter) refused(now int64, err error) {
	a := r.a
	msg := err.Error()
	r.lastError.Store(&msg)
	if rf, ok := a.refusalOf(err); ok {
		rf.Since = time.Unix(0, now)
		if prev := r.refusal.Load(); prev != nil && prev.Cause == rf.Cause {
			rf.Since = prev.Since
		}
		r.refusal.Store(&rf)
		if r.logDue(rf.Cause, now) {
			a.log.Error("the coordinators refuse this agent's reports: nothing it decides is billed", "cause", rf.Cause, "fix", rf.Fix,
				"node", a.cfg.NodeID, "region", a.cfg.Region, "checks", a.checksNow(), "error", err)
		}
		return
	}
	// A report that failed another way (no leader, a timeout) says nothing
	// of the credential: the refusal stands until a report is answered,
	// which logs that the coordinators accept this agent again.
	if !a.rulesReady() && now-r.lastOK >= 2*int64(a.interval()) && r.logDue("unanswered", now) {
		a.log.Error("no coordinator has answered, and this agent does not have the cluster's rules",
			"since", time.Duration(now-r.lastOK).Round(time.Millisecond), "checks", a.checksNow(), "error", err)
	}
}

// logDue reports whether cause may be logged at ERROR now, and if so
// notes it.
func (r *reporter) logDue(cause string, now int64) bool {
	if r.logged == nil {
		r.logged = map[string]int64{}
	}
	if last, ok := r.logged[cause]; ok && now-last < int64(refusalLogEvery) {
		return false
	}
	r.logged[cause] = now
	return true
}

// accepted notes an answered report: nothing is refused any more.
func (r *reporter) accepted() {
	r.lastError.Store(nil)
	if rf := r.refusal.Swap(nil); rf != nil {
		r.a.log.Info("the coordinators accept this agent's reports again", "refused_since", rf.Since.Format(time.RFC3339), "cause", rf.Cause)
	}
	clear(r.logged)
}

// billed is where a cut of c's usage goes: acc, unless c is the start-up
// rules, enforced locally and billed nowhere, as a standalone agent's.
func billed(c *compiled, acc map[usageKey]*usageCounts) map[usageKey]*usageCounts {
	if c.source == sourceStartup {
		return nil
	}
	return acc
}
