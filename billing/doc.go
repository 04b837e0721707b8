// Package billing turns ledger lines into a bill: the lines of every
// region's cluster merged into one line per tenant, rule, billing window
// and region, a total over the regions where more than one counted, each
// region's share of what was admitted, the allowance each line was billed
// against (rules.Rule.Allowance and RegionPart), and what a parent
// granted a region. It writes the bill as CSV, JSON lines or a table.
//
// It is one implementation for everything that bills: `allot usage`
// today, and whatever else exports the ledger (an HTTP export, a sink
// into a billing database) tomorrow, so that the same ledger gives the
// same bill, to the unit, wherever it is read. It is pure: the ledger's
// own lines (package ledger) in, plain structs and bytes out, no gRPC, no
// protobuf, no clock. Reading the ledger is the caller's business.
//
// Counts are exact: totals are uint64 sums and shares and allowances are
// rationals, because a bill must not drift the way float64 sums do.
package billing
