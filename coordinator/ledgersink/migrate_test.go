package ledgersink_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/ledgersink"
	"github.com/allot-io/allot/internal/pgserver/pgtest"
)

func TestMigrateTwiceIsANoop(t *testing.T) {
	s, dsn := migrated(t)
	conn := connect(t, dsn)
	const versions = "SELECT count(*)::int8 || '@' || max(applied_at)::text FROM allot_schema_migrations"
	before := scalar[string](t, conn, versions)
	if err := s.Migrate(ctxFor(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	if after := scalar[string](t, conn, versions); after != before {
		t.Errorf("a second Migrate changed allot_schema_migrations: %s, was %s", after, before)
	}
	if v := scalar[int32](t, conn, "SELECT max(version) FROM allot_schema_migrations"); v < 1 {
		t.Errorf("schema version %d after Migrate", v)
	}
}

func TestMigrateConcurrently(t *testing.T) {
	dsn := pgtest.Database(t)
	const n = 4
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		s := open(t, dsn)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Migrate(ctxFor(t, time.Minute))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Migrate %d: %v", i, err)
		}
	}
	conn := connect(t, dsn)
	if rows, max := scalar[int64](t, conn, "SELECT count(*) FROM allot_schema_migrations"),
		scalar[int32](t, conn, "SELECT max(version) FROM allot_schema_migrations"); rows != int64(max) {
		t.Errorf("%d rows in allot_schema_migrations for version %d: a version was applied twice or skipped", rows, max)
	}
}

func TestMigrateRefusesANewerSchema(t *testing.T) {
	s, dsn := migrated(t)
	conn := connect(t, dsn)
	if _, err := conn.Exec(ctxFor(t, 10*time.Second), "INSERT INTO allot_schema_migrations (version) SELECT max(version) + 1 FROM allot_schema_migrations"); err != nil {
		t.Fatal(err)
	}
	err := s.Migrate(ctxFor(t, time.Minute))
	if !errors.Is(err, ledgersink.ErrSchemaTooNew) {
		t.Fatalf("Migrate of a newer schema: %v, want ErrSchemaTooNew", err)
	}
	if c := ledgersink.Cause(err); c != "schema" {
		t.Errorf("Cause = %q, want schema", c)
	}
}

func TestSchemaIsDocumented(t *testing.T) {
	_, dsn := migrated(t)
	conn := connect(t, dsn)
	for _, table := range []string{"allot_usage", "allot_export_position", "allot_schema_migrations"} {
		if c := scalar[*string](t, conn, "SELECT obj_description($1::regclass, 'pg_class')", table); c == nil || *c == "" {
			t.Errorf("table %s has no COMMENT", table)
		}
	}
	rows, err := conn.Query(ctxFor(t, 10*time.Second), `SELECT c.relname, a.attname
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
WHERE c.relname IN ('allot_usage', 'allot_export_position') AND a.attnum > 0 AND NOT a.attisdropped
  AND col_description(c.oid, a.attnum) IS NULL`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var table, column string
		if err := rows.Scan(&table, &column); err != nil {
			t.Fatal(err)
		}
		t.Errorf("column %s.%s has no COMMENT", table, column)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// Every text column orders bytewise, as the ledger does.
	if n := scalar[int64](t, conn, `SELECT count(*) FROM information_schema.columns
WHERE table_name IN ('allot_usage', 'allot_export_position') AND data_type = 'text'
  AND collation_name IS DISTINCT FROM 'C'`); n != 0 {
		t.Errorf("%d text columns are not COLLATE \"C\"", n)
	}
}
