// Package ledgerpb converts ledger lines (package ledger) to and from
// their wire form, the usage service's allotpb.UsageRecord.
//
// The conversion lives here, next to the generated messages, as the rule
// model's does in proto/rulespb, and nowhere else: the coordinator writes
// its answers with ToProto, and `allot usage`, the other groups of a
// split region and the chaos harness read them with FromProto, so that a
// field added to the record is added in one place. Package ledger stays
// free of protobuf, and billing with it.
package ledgerpb
