// Package ledger is the usage ledger's vocabulary: a line's Key (billing
// window, tenant, rule, region), the Line itself (what the tenant was
// admitted and denied there and how much of it was overage, what a parent
// granted, whether the window is final, and the Terms it was counted
// against: the tenant's cycle and the limit in force), the Position an
// export has reached, and the one order all three are compared in.
//
// # Why one package
//
// Four parts of Allot hold ledger lines: the replicated state machine
// keeps them, the ledger sink writes them to PostgreSQL and reads them
// back, the usage service pages through both, and billing turns them into
// a bill for `allot usage` (the chaos harness checks all of them against
// what the agents answered). Each used to have its own line, key and
// position, with a conversion at every border, and each had its own
// comparison of keys. Two comparisons that disagree on one pair of keys
// is a line exported twice or never, so they share one: CompareKeys.
//
// # The order, and exactly once
//
// Lines are ordered by window, then tenant, rule and region compared
// bytewise ("B" < "a" < "é"): the order of the state's B-tree, of its
// export pages and usage pages, and of PostgreSQL's COLLATE "C", which the
// sink's columns use. An export is exactly once because of it: the sink
// commits each batch together with the position it leaves (the key of its
// last line), the cluster replicates that position through Raft, and the
// next batch is the final lines after it. A position only moves forward
// (Position.After), and a batch is written only if the stored position is
// still the one it was read after (Position.Same); both compare keys in
// this order, so a line below the position is never written again and
// none above it is skipped.
//
// # A leaf
//
// The package imports the standard library only, like algo and lease, and
// no wire types: the wire's forms are converted at their own borders (the
// usage service's record in proto/ledgerpb, the Raft log's position in the
// state package), so that billing stays pure and any part of Allot can
// name a ledger line without linking protobuf. It sits at the top level,
// in the model layer beside rules, rather than under coordinator/:
// its users are not all the coordinator's (billing serves the CLI, the
// wire's converter sits under proto, the harnesses under cmd), and an
// import from the wire or the CLI into coordinator/ for a vocabulary would
// point the package map's arrows the wrong way.
package ledger
