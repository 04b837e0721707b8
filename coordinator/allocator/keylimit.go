package allocator

import (
	"strings"
	"time"

	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
)

// keyLimit is a key's own limit: limit per period; zero for none.
type keyLimit struct {
	limit  int64
	period time.Duration
	burst  int64 // the call's own, or 0 for the rule's scaled
}

// demandLimit is a demand's own limit, and whether it may have one: only a
// key of a descriptor rule, named for that limit (rules.CallLimitKeySuffix),
// so that no report changes the limit of a key other nodes report under
// the rule's. ValidateReport bounded the numbers.
func demandLimit(r *rules.Rule, d *allotpb.KeyDemand) (keyLimit, bool) {
	if d.GetLimit() == 0 {
		return keyLimit{}, true
	}
	own := keyLimit{d.GetLimit(), time.Duration(d.GetPeriodNano()), d.GetBurst()}
	return own, r.Scope == rules.Descriptor && strings.HasSuffix(d.GetKey(), rules.CallLimitKeySuffix(own.limit, own.period, own.burst))
}

// ruleWith is r as a pool with this own limit divides it, or false when
// r's algorithm cannot take the limit (agents then decide by the rule's).
func (own keyLimit) ruleWith(r *rules.Rule) (*rules.Rule, bool) {
	if own.limit == 0 {
		return r, true
	}
	d := r.WithLimitBurst(own.limit, own.period, own.burst)
	if d.AlgoConfig(d.Limit).Validate() != nil {
		return nil, false
	}
	return &d, true
}
