package allotpb

import (
	"strconv"
	"strings"
)

// ParseViolation reads a field violation's path: usage.counts[i].f and
// demand[i].f name one entry; anything else is about the whole report.
func ParseViolation(field, desc string) Violation {
	v := Violation{Field: field, Description: desc, Count: -1, Demand: -1}
	index := func(prefix string) int {
		rest, ok := strings.CutPrefix(field, prefix)
		if !ok {
			return -1
		}
		end := strings.IndexByte(rest, ']')
		if end < 0 {
			return -1
		}
		i, err := strconv.Atoi(rest[:end])
		if err != nil || i < 0 {
			return -1
		}
		return i
	}
	v.Count, v.Demand = index("usage.counts["), index("demand[")
	return v
}

// ReportHeader is a report's header without its usage or demand: for the
// further parts of a split report, and each shard group's part. It keeps
// every version the agent follows: a part without its overrides version
// was answered every override afresh, each answer, which started every
// overridden tenant's keys afresh each interval.
func ReportHeader(req *ReportRequest) *ReportRequest {
	return &ReportRequest{
		Protocol: req.GetProtocol(), Node: req.GetNode(), Incarnation: req.GetIncarnation(), Region: req.GetRegion(),
		SentUnixNano: req.GetSentUnixNano(), IntervalNano: req.GetIntervalNano(), RulesVersion: req.GetRulesVersion(),
		Leaving: req.GetLeaving(), Urgent: req.GetUrgent(), Group: req.GetGroup(), ReporterGroup: req.GetReporterGroup(),
		OverridesVersion: req.GetOverridesVersion(), ResetsVersion: req.GetResetsVersion(), ResetsFollowing: req.GetResetsFollowing(),
	}
}
