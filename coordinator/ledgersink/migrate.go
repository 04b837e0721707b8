package ledgersink

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// migrationFiles are the schema's versions, migrations/NNNN_name.sql,
// applied in order. A released file never changes; a change to the
// schema is a new file.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrationLock is the pg_advisory_xact_lock key every migration step
// holds, so coordinators starting at once apply each version once.
const migrationLock int64 = 0x616c6c6f745f6d67 // "allot_mg"

const createVersionTable = `CREATE TABLE allot_schema_migrations (
    version    integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE allot_schema_migrations IS
    'Versions of the Allot ledger export schema applied to this database (coordinator/ledgersink/migrations), one row each.'`

// migration is one embedded schema version.
type migration struct {
	version int
	name    string
	sql     string
}

// migrations reads the embedded files, checking that they number 1, 2, …
// with no gap or repeat.
func migrations() ([]migration, error) {
	return readMigrations(migrationFiles, "migrations")
}

func readMigrations(fsys fs.FS, dir string) ([]migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("ledgersink: reading migrations: %w", err)
	}
	var out []migration
	for _, e := range entries { // ReadDir sorts by name
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".sql") {
			continue
		}
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || len(num) != 4 {
			return nil, fmt.Errorf("ledgersink: migration %s is not named NNNN_name.sql", name)
		}
		if v != len(out)+1 {
			return nil, fmt.Errorf("ledgersink: migration %s is version %d, want %d: versions must run 1, 2, … without gaps", name, v, len(out)+1)
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("ledgersink: reading migration %s: %w", name, err)
		}
		out = append(out, migration{version: v, name: name, sql: string(b)})
	}
	return out, nil
}

// Migrate brings the database's schema to the newest version this
// binary has: each missing version in its own transaction, recorded in
// allot_schema_migrations, under an advisory lock, so two coordinators
// migrating at once are safe and a migrated database is left alone. A
// database at a version newer than this binary's is refused with an
// error wrapping ErrSchemaTooNew.
func (s *Sink) Migrate(ctx context.Context) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	latest := len(ms)
	current, err := s.schemaVersion(ctx, latest)
	if err != nil {
		return err
	}
	for _, m := range ms {
		if m.version <= current {
			continue
		}
		applied, err := s.apply(ctx, m, latest)
		if err != nil {
			return err
		}
		if applied {
			s.log.Info("applied ledger schema migration", "version", m.version, "file", m.name)
		}
	}
	return nil
}

// schemaVersion makes the version table if missing and returns the
// database's version.
func (s *Sink) schemaVersion(ctx context.Context, latest int) (int, error) {
	var current int
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		var err error
		current, err = lockedVersion(ctx, tx, latest)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("ledgersink: migrate: %w", err)
	}
	return current, nil
}

// lockedVersion takes the migration lock for tx and reads the version.
func lockedVersion(ctx context.Context, tx pgx.Tx, latest int) (int, error) {
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrationLock); err != nil {
		return 0, fmt.Errorf("taking the migration lock: %w", err)
	}
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass('allot_schema_migrations') IS NOT NULL").Scan(&exists); err != nil {
		return 0, fmt.Errorf("looking for allot_schema_migrations: %w", err)
	}
	if !exists {
		if _, err := tx.Exec(ctx, createVersionTable); err != nil {
			return 0, fmt.Errorf("creating allot_schema_migrations: %w", err)
		}
	}
	var current int
	if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM allot_schema_migrations").Scan(&current); err != nil {
		return 0, fmt.Errorf("reading the schema version: %w", err)
	}
	if current > latest {
		return 0, fmt.Errorf("%w: the database is at version %d, this binary knows up to %d", ErrSchemaTooNew, current, latest)
	}
	return current, nil
}

// apply runs one migration unless another process did meanwhile.
func (s *Sink) apply(ctx context.Context, m migration, latest int) (applied bool, _ error) {
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		current, err := lockedVersion(ctx, tx, latest)
		if err != nil || current >= m.version {
			return err
		}
		if current != m.version-1 {
			return fmt.Errorf("the database is at version %d, not %d", current, m.version-1)
		}
		if _, err := tx.Exec(ctx, m.sql); err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO allot_schema_migrations (version) VALUES ($1)", m.version); err != nil {
			return fmt.Errorf("recording version %d: %w", m.version, err)
		}
		applied = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("ledgersink: migrate to version %d: %w", m.version, err)
	}
	return applied, nil
}
