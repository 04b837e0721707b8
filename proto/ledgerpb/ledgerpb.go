package ledgerpb

import (
	"time"

	"github.com/allot-io/allot/ledger"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// ToProto is l as QueryUsage answers it; exported says that it was read
// from the ledger sink rather than the cluster's memory. The record shares
// l's Granted, which the ledger never changes in place.
func ToProto(l ledger.Line, exported bool) *allotpb.UsageRecord {
	r := &allotpb.UsageRecord{
		Tenant: l.Tenant, Rule: l.Rule, Region: l.Region,
		WindowStart: timestamppb.New(time.Unix(l.Window, 0)), WindowEnd: timestamppb.New(time.Unix(l.Window+l.WindowSeconds, 0)),
		Admitted: l.Admitted, Denied: l.Denied, Final: l.Final, Granted: l.Granted, Exported: exported, Overage: l.Overage,
	}
	if start, ok := l.Cycle(); ok {
		r.CycleStart = timestamppb.New(start)
	}
	if l.Limit != 0 {
		r.Limit = &l.Limit
	}
	return r
}

// FromProto is the ledger line r carries. Windows are whole seconds, as a
// coordinator sends them; Exported, which says where the line was read
// from, is not part of the line and is left on the record.
func FromProto(r *allotpb.UsageRecord) ledger.Line {
	start := r.GetWindowStart().GetSeconds()
	return ledger.Line{
		Key:           ledger.Key{Window: start, Tenant: r.GetTenant(), Rule: r.GetRule(), Region: r.GetRegion()},
		WindowSeconds: r.GetWindowEnd().GetSeconds() - start,
		Admitted:      r.GetAdmitted(), Denied: r.GetDenied(), Overage: r.GetOverage(), Granted: r.Granted, Final: r.GetFinal(),
		Terms: ledger.Terms{CycleStart: r.GetCycleStart().GetSeconds(), Limit: r.GetLimit()},
	}
}
