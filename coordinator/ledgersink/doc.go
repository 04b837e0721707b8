// Package ledgersink exports a coordinator cluster's final ledger lines
// into PostgreSQL, for a billing team to own and query with SQL: the
// table allot_usage, one row per cluster, billing window, tenant, rule
// and region, with the terms the usage was counted against (the tenant's
// cycle and limit: ledger.Terms) so that an invoice is one query of it
// (migrations/ documents every column, and queries.go holds the queries
// docs quote).
//
// # Exactly once
//
// A cluster exports its final lines in ledger order, in batches. Each
// batch is one transaction that does two things: it adds the lines to
// allot_usage, and it moves the cluster's row in allot_export_position
// from the key the batch was read after to the batch's last key. The
// move is a compare-and-set: Write locks the position row (SELECT … FOR
// UPDATE) and goes on only if it still says what the caller read
// (ledger.Position.Same: Set, Last and Lines); otherwise it writes
// nothing and returns a *PositionError. Lines and position commit
// together or not at all, so there is no window in which one is written
// without the other, whatever crashes where: a leader that dies after
// the commit but before hearing of it, a new leader replaying from the
// position it last saw, two leaders of a partitioned cluster racing.
// Whoever reads the position after a failure resumes from exactly where
// the database is. No outbox, no deduplication table, no idempotency keys
// to expire: the position is the one fact, and it lives beside the data
// it counts.
//
// # Several batches at once
//
// One transaction keeps one PostgreSQL backend busy, and that backend
// spends most of a batch maintaining the indexes, with the client and
// the commit's flush waiting their turn. A Pipeline keeps several
// consecutive batches in flight, each in its own transaction and on its
// own connection: a batch copies its lines while the one before it
// commits, then takes the position's lock once that one holds it, so the
// compare-and-sets, and the commits, happen in batch order. Each batch
// expects the position the one before it leaves; if that one fails, the
// position is not what this batch expects, and it writes nothing. The
// guarantee is Write's, batch by batch.
//
// # Additive upsert
//
// A line's key is normally written once, since every batch starts after
// the position and a final window takes no new line. So a batch is first
// COPYed straight into allot_usage under a savepoint: new rows, no
// staging, no ON CONFLICT (about twice as fast, BenchmarkWrite's "copy"
// against "stage"). A key can be written again: a window past the
// ledger's retention that a late report reopened, or a cluster's
// position row deleted while its rows were not. Then the COPY fails on
// the primary key, the savepoint undoes it, and the batch goes through
// a staging table and one INSERT … ON CONFLICT DO UPDATE that adds to
// the row rather than overwriting it, counts saturating at bigint's
// maximum and granted summed with NULL as absent, so no count already
// exported is lost; the terms are the later line's, as the ledger keeps
// the later usage's, unless it recorded none.
//
// # Names
//
// PostgreSQL's text holds no NUL byte; a tenant may. Names are stored
// with NUL and SOH escaped in an order-preserving way (names.go), so
// that no line can stop the export and rows keep the ledger's order.
//
// # COLLATE "C"
//
// The ledger orders tenants, rules and regions bytewise ("B" < "a" <
// "é"), as Go compares strings. A database collation would order them
// by language, so the position's "after this key" and Query's pages
// would disagree with the ledger about which line comes next, and a
// line could be skipped or exported twice across a batch boundary.
// Every text column is COLLATE "C", which is bytewise in UTF-8, and
// ledger.CompareKeys is the same order in Go: the database, the state
// machine and this package sort alike whatever the server's default
// collation.
//
// # Failures
//
// Open never connects, so a coordinator starts while its database is
// down; Write then fails, and Cause labels the failure (unreachable,
// auth, read_only, disk_full, schema, timeout, position, …) for a metric
// and an alert. Migrate applies the embedded, numbered migrations in
// order under an advisory lock, and refuses a database that a newer
// binary has migrated past what this one knows (ErrSchemaTooNew).
package ledgersink
