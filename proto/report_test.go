package allotpb

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// TestReportHeaderKeepsEveryHeaderField: every field of a report but its
// usage and demand is in its header, so that a field added later (a
// version the agent follows) is not lost on the parts of a split report.
func TestReportHeaderKeepsEveryHeaderField(t *testing.T) {
	req := &ReportRequest{}
	m := req.ProtoReflect()
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		switch f.Kind() {
		case protoreflect.BoolKind:
			m.Set(f, protoreflect.ValueOfBool(true))
		case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
			m.Set(f, protoreflect.ValueOfUint64(7))
		case protoreflect.Int64Kind:
			m.Set(f, protoreflect.ValueOfInt64(7))
		case protoreflect.StringKind:
			m.Set(f, protoreflect.ValueOfString("x"))
		case protoreflect.EnumKind:
			m.Set(f, protoreflect.ValueOfEnum(1))
		}
	}
	want := proto.Clone(req).(*ReportRequest)
	want.Usage, want.Demand = nil, nil
	if got := ReportHeader(req); !proto.Equal(got, want) {
		t.Fatalf("ReportHeader lost fields:\n got %v\nwant %v", got, want)
	}
}
