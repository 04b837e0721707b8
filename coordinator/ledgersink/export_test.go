package ledgersink

// UseUnnest makes s.Write send lines as arrays to one INSERT … SELECT
// FROM unnest(…) instead of COPY into a staging table, for
// BenchmarkWrite's comparison.
func UseUnnest(s *Sink) { s.write = unnestUpsert }

// UseCopyUpsert makes s.Write always stage and upsert, as it does when a
// key of the batch is already stored.
func UseCopyUpsert(s *Sink) { s.write = copyUpsert }
