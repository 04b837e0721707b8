package coordinator

import (
	"fmt"
	"slices"
	"strings"

	"github.com/allot-io/allot/proto/rulespb"
)

// dumpState renders a state deterministically, for comparing replicas.
func dumpState(s *state) string {
	var lines []string
	lines = append(lines, fmt.Sprintf("epoch %d window %d interval %d ttl %d grants %d/%d rules %s", s.epoch, s.billingWindow, s.reportInterval, s.leaseTTL, s.grantEpoch, s.grantSeq, rulespb.SetToProto(s.rules)))
	for id, m := range s.members {
		lines = append(lines, fmt.Sprintf("member %s %s", id, m))
	}
	for k, inc := range s.incarnations {
		lines = append(lines, fmt.Sprintf("inc %s %d %d %d", k, inc.lastSeq, inc.lastApplied, inc.lastCut))
	}
	lines = append(lines, dumpLedger(s)...)
	for w, r := range s.open {
		var rs []string
		for k := range r {
			rs = append(rs, k.String())
		}
		slices.Sort(rs)
		lines = append(lines, fmt.Sprintf("open %d %v", w, rs))
	}
	for w := range s.final {
		lines = append(lines, fmt.Sprintf("final %d", w))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

func dumpLedger(s *state) []string {
	var lines []string
	for k, u := range s.ledger {
		line := fmt.Sprintf("ledger %s/%s/%s/%d %d %d", k.tenant, k.rule, k.region, k.window, u.admitted, u.denied)
		if u.granted != nil {
			line += fmt.Sprintf(" granted %g", *u.granted)
		}
		lines = append(lines, line)
	}
	slices.Sort(lines)
	return lines
}
