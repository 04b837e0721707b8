package ledgerpb_test

import (
	"testing"
	"time"

	"github.com/allot-io/allot/ledger"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/proto/ledgerpb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestRoundTrip(t *testing.T) {
	start := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	granted := 12.5
	key := ledger.Key{Window: start.Unix(), Tenant: "acme", Rule: "quota", Region: "eu-west"}
	tests := []struct {
		name     string
		line     ledger.Line
		exported bool
		want     *allotpb.UsageRecord
	}{{
		name: "an open line from memory",
		line: ledger.Line{Key: key, WindowSeconds: 3600, Admitted: 7, Denied: 3},
		want: &allotpb.UsageRecord{Tenant: "acme", Rule: "quota", Region: "eu-west",
			WindowStart: timestamppb.New(start), WindowEnd: timestamppb.New(start.Add(time.Hour)), Admitted: 7, Denied: 3},
	}, {
		name:     "a final, exported line with a grant",
		line:     ledger.Line{Key: key, WindowSeconds: 86400, Admitted: 1 << 63, Granted: &granted, Final: true},
		exported: true,
		want: &allotpb.UsageRecord{Tenant: "acme", Rule: "quota", Region: "eu-west",
			WindowStart: timestamppb.New(start), WindowEnd: timestamppb.New(start.Add(24 * time.Hour)), Admitted: 1 << 63,
			Granted: &granted, Final: true, Exported: true},
	}, {
		name: "a line with terms",
		line: ledger.Line{Key: key, WindowSeconds: 3600, Admitted: 7, Overage: 2, Terms: ledger.Terms{CycleStart: start.Add(-12 * 24 * time.Hour).Unix(), Limit: 100000}},
		want: &allotpb.UsageRecord{Tenant: "acme", Rule: "quota", Region: "eu-west",
			WindowStart: timestamppb.New(start), WindowEnd: timestamppb.New(start.Add(time.Hour)), Admitted: 7, Overage: 2,
			CycleStart: timestamppb.New(start.Add(-12 * 24 * time.Hour)), Limit: ptr(int64(100000))},
	}, {
		name: "a window before 1970",
		line: ledger.Line{Key: ledger.Key{Window: -7200}, WindowSeconds: 3600},
		want: &allotpb.UsageRecord{WindowStart: timestamppb.New(time.Unix(-7200, 0)), WindowEnd: timestamppb.New(time.Unix(-3600, 0))},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := ledgerpb.ToProto(tt.line, tt.exported)
			if !proto.Equal(rec, tt.want) {
				t.Fatalf("ToProto = %v, want %v", rec, tt.want)
			}
			back := ledgerpb.FromProto(rec)
			if back.Key != tt.line.Key || back.WindowSeconds != tt.line.WindowSeconds || back.Admitted != tt.line.Admitted ||
				back.Denied != tt.line.Denied || back.Final != tt.line.Final || !sameGranted(back.Granted, tt.line.Granted) ||
				back.Terms != tt.line.Terms || back.Overage != tt.line.Overage {
				t.Fatalf("FromProto(ToProto(l)) = %+v, want %+v", back, tt.line)
			}
		})
	}
}

func TestFromProtoOfNothing(t *testing.T) {
	if got := ledgerpb.FromProto(&allotpb.UsageRecord{}); got != (ledger.Line{}) {
		t.Fatalf("FromProto of an empty record = %+v, want the zero line", got)
	}
}

func sameGranted(a, b *float64) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

func ptr[T any](v T) *T { return &v }
