package agent

import (
	"errors"
	"fmt"
	"time"

	allotpb "github.com/allot-io/allot/proto"
)

// MaxCost is the largest cost of one request (2^32 - 1, as Envoy's
// hits_addend): Check refuses a costlier request without counting it, and
// the sidecar answers it 400. With it no per-interval counter can wrap.
const MaxCost = allotpb.MaxCost

// Bounds the sidecar enforces on a request's attributes, the same the
// coordinators enforce on names in reports: longer values are refused
// with 400 rather than billed under a name nobody sent.
const (
	// MaxNameLen bounds Tenant and Plan.
	MaxNameLen = allotpb.MaxNameLen
	// MaxAttrLen bounds User, Route and IP; keys hash values over 128
	// bytes, so these only bound what a hostile client can make the
	// sidecar hash.
	MaxAttrLen = 1024
)

// ErrInvalidRequest is wrapped by ValidateRequest's errors.
var ErrInvalidRequest = errors.New("agent: invalid request")

// ValidateRequest checks a request against the bounds a sidecar enforces
// at its edge: names within MaxNameLen, other attributes within
// MaxAttrLen, a cost from 0 to MaxCost. The error names the field.
// Check itself accepts any length (bounding names for billing) and
// refuses only a cost over MaxCost.
func ValidateRequest(r Request) error {
	for _, f := range [...]struct {
		name, value string
		max         int
	}{{"tenant", r.Tenant, MaxNameLen}, {"plan", r.Plan, MaxNameLen}, {"user", r.User, MaxAttrLen}, {"route", r.Route, MaxAttrLen}, {"ip", r.IP, MaxAttrLen}} {
		if len(f.value) > f.max {
			return fmt.Errorf("%w: %s: must be at most %d bytes, got %d", ErrInvalidRequest, f.name, f.max, len(f.value))
		}
	}
	if r.Cost < 0 || r.Cost > MaxCost {
		return fmt.Errorf("%w: cost: must be from 0 to %d, got %d", ErrInvalidRequest, int64(MaxCost), r.Cost)
	}
	return nil
}

// Priority is how important a request is when a global capacity rule is the
// limit being hit: lower priorities are refused first, and Exempt requests
// are never refused by it. The zero value is Interactive.
type Priority uint8

const (
	// Interactive is a request a person is waiting for: the default.
	Interactive Priority = iota
	// Batch is background work (exports, syncs): shed first.
	Batch
	// Critical is a request that must get through if anything does.
	Critical
	// Exempt is never refused by a capacity rule: health checks, payment
	// callbacks. It is still counted.
	Exempt
)

var priorityNames = [...]string{Interactive: "interactive", Batch: "batch", Critical: "critical", Exempt: "exempt"}

func (p Priority) String() string {
	if int(p) < len(priorityNames) {
		return priorityNames[p]
	}
	return fmt.Sprintf("priority(%d)", uint8(p))
}

// ParsePriority reads a priority's name; "" is Interactive.
func ParsePriority(s string) (Priority, error) {
	if s == "" {
		return Interactive, nil
	}
	for i, name := range priorityNames {
		if name == s {
			return Priority(i), nil
		}
	}
	return 0, fmt.Errorf("agent: unknown priority %q (want batch, interactive, critical or exempt)", s)
}

// MarshalText implements encoding.TextMarshaler.
func (p Priority) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (p *Priority) UnmarshalText(b []byte) error {
	v, err := ParsePriority(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// shedRank orders priorities for shedding: higher is shed later.
func (p Priority) shedRank() uint8 {
	switch p {
	case Batch:
		return 1
	case Critical:
		return 3
	}
	return 2
}

// Request is what the agent knows about one request.
type Request struct {
	Tenant string
	// Plan is the tenant's plan, which may set its limits (rules' plans).
	Plan     string
	User     string
	Route    string
	IP       string
	Priority Priority
	// Cost is the request's weight; zero means 1.
	Cost int64
	// Peek asks without spending: Check answers as it would for a request
	// of Cost (zero meaning 1) right now, whether it would be admitted,
	// under which rule, with the limit, the remaining before it, and when
	// to retry if not, and spends nothing in any rule. A peek is not
	// billed, not counted as a decision (allot_agent_decisions_total), and
	// asks no lease; it is counted in allot_agent_peeks_total. For a UI
	// that shows what is left.
	Peek bool

	// desc is set by CheckDescriptors only. A pointer keeps Request
	// comparable.
	desc *Descriptor
	// res is set by Reserve only: the request's spending is held there
	// and billed when it is settled.
	res *reservation
	// lst is the store of the descriptor's call limit (Descriptor.Limit),
	// set by CheckDescriptors: it holds the request's key, named and
	// hashed apart from the rule's (calllimit.go).
	lst *limitStore
}

// Decision is the agent's answer for one request.
type Decision struct {
	Allowed bool
	// Rule names the rule that refused the request, or, when it was
	// admitted, the rule closest to its limit; empty when no rule applies.
	Rule string
	// Scope is the rule's scope: global, ip, tenant, user or route.
	Scope string
	// Limit and Period are the rule's limit for this request's tenant and
	// plan: Limit per Period.
	Limit  int64
	Period time.Duration
	// Remaining estimates what is left of Limit across the fleet: the
	// node's own remaining share scaled to the whole limit.
	Remaining int64
	// Available is what the deciding limiter on this node could admit at
	// this instant, in its own units: for GCRA 1+Burst less what is
	// spent, for a token bucket its tokens, for a window what is left of
	// the node's count. Remaining scales it to Limit; redis-cell's
	// CL.THROTTLE reports it as it is.
	Available int64
	// RetryAfter is when a refused request may be retried; negative means
	// it never will fit (its cost exceeds the limit).
	RetryAfter time.Duration
	// ResetAfter is when the rule is back to full.
	ResetAfter time.Duration
	// Fallback is set when the deciding rule ran on its fail mode because
	// no coordinator could be reached.
	Fallback bool
	// NoRules is set when the agent had no rules to decide by, and its
	// Config.UntilRules did: a refusal (UntilRulesClosed, RetryAfter one
	// report interval, no rule named) or an admission (UntilRulesOpen).
	NoRules bool
}
