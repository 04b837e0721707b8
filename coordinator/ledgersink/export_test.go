package ledgersink

import "context"

// UseUnnest makes s.Write send lines as arrays to one INSERT … SELECT
// FROM unnest(…) instead of COPY into a staging table, for
// BenchmarkWrite's comparison.
func UseUnnest(s *Sink) { s.write = unnestUpsert }

// UseCopyUpsert makes s.Write always stage and upsert, as it does when a
// key of the batch is already stored.
func UseCopyUpsert(s *Sink) { s.write = copyUpsert }

// MigrateTo brings a database's schema to version, no further, as an
// older coordinator would have: for tests of what a later migration does
// to its rows.
func MigrateTo(ctx context.Context, s *Sink, version int) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	for _, m := range ms[:version] {
		if _, err := s.apply(ctx, m, len(ms)); err != nil {
			return err
		}
	}
	return nil
}
