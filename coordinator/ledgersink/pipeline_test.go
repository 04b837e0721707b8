package ledgersink_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/allot-io/allot/coordinator/ledgersink"
	"github.com/allot-io/allot/internal/testwait"
	"github.com/allot-io/allot/ledger"
)

// pipe is a pipeline of cluster eu-1 after from, on s.
func pipe(t *testing.T, s *ledgersink.Sink, from ledger.Position) *ledgersink.Pipeline {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := s.Pipeline(ctx, "eu-1", from, time.Minute)
	t.Cleanup(func() {
		cancel()
		p.Close()
	})
	return p
}

// openExports counts the transactions open in the database's client
// backends other than conn's, and how many of them wait on a lock.
func openExports(t *testing.T, conn *pgx.Conn) (open, waiting int) {
	t.Helper()
	err := conn.QueryRow(ctxFor(t, 10*time.Second), `SELECT count(*), count(*) FILTER (WHERE wait_event_type = 'Lock')
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'
  AND xact_start IS NOT NULL`).Scan(&open, &waiting)
	if err != nil {
		t.Fatal(err)
	}
	return open, waiting
}

// TestPipelineCommitsInOrder: batches sent several at a time commit one
// after the other, each moving the position from where the one before
// left it, and the table holds each line once.
func TestPipelineCommitsInOrder(t *testing.T) {
	s, dsn := migrated(t)
	const batches, size, depth = 24, 50, 4
	p := pipe(t, s, ledger.Position{})
	var results []ledgersink.Result
	for b := range batches {
		if p.Len() == depth {
			results = append(results, p.Wait())
		}
		if err := p.Send(batch(hour(b), size)); err != nil {
			t.Fatal(err)
		}
		if want := uint64((b + 1) * size); p.Tail().Lines != want {
			t.Fatalf("after %d batches sent, Tail has %d lines, want %d", b+1, p.Tail().Lines, want)
		}
	}
	for p.Len() > 0 {
		results = append(results, p.Wait())
	}
	for i, r := range results {
		want := ledger.Position{Set: true, Last: batch(hour(i), size)[size-1].Key, Lines: uint64((i + 1) * size), Batches: uint64(i + 1)}
		if r.Err != nil || r.Position != want || r.Lines != size {
			t.Errorf("batch %d: %+v, want position %+v", i, r, want)
		}
	}
	if got, err := s.Position(ctxFor(t, 10*time.Second), "eu-1"); err != nil || got != p.Tail() {
		t.Errorf("Position = %+v, %v; want the last batch's %+v", got, err, p.Tail())
	}
	if got := sumUsage(t, dsn); got != (totals{Rows: batches * size, Admitted: batches * size}) {
		t.Errorf("allot_usage holds %+v, want %d rows admitting one each", got, batches*size)
	}
}

// TestPipelineOverlapsTransactions: while the first batch waits for the
// position's lock, the batches behind it copy their lines in
// transactions of their own; once the lock is free, all commit.
func TestPipelineOverlapsTransactions(t *testing.T) {
	s, dsn := migrated(t)
	ctx := ctxFor(t, time.Minute)
	from, err := s.Write(ctx, "eu-1", ledger.Position{}, batch(hour(0), 10))
	if err != nil {
		t.Fatal(err)
	}
	conn := connect(t, dsn)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "SELECT 1 FROM allot_export_position WHERE cluster_id = 'eu-1' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	p := pipe(t, s, from)
	for b := 1; b <= 3; b++ {
		if err := p.Send(batch(hour(b), 10)); err != nil {
			t.Fatal(err)
		}
	}
	watch := connect(t, dsn)
	testwait.For(t, 20*time.Second, "three transactions open, the first waiting on the lock", func() bool {
		open, waiting := openExports(t, watch)
		return open == 4 && waiting == 1 // the test's own transaction too
	})
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for b := 1; b <= 3; b++ {
		if r := p.Wait(); r.Err != nil || r.Position.Batches != uint64(b+1) {
			t.Fatalf("batch %d: %+v", b, r)
		}
	}
	if got := sumUsage(t, dsn); got != (totals{Rows: 40, Admitted: 40}) {
		t.Errorf("allot_usage holds %+v, want 40 rows admitting one each", got)
	}
}

// TestPipelineStopsBehindAFailure: a batch the database refuses fails,
// the batches behind it write nothing, and the position stays where the
// last good batch left it.
func TestPipelineStopsBehindAFailure(t *testing.T) {
	s, dsn := migrated(t)
	conn := connect(t, dsn)
	ctx := ctxFor(t, time.Minute)
	// A trigger refuses tenant "zpoison", as a full disk or a dropped
	// column would refuse a batch.
	for _, sql := range []string{
		`CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.tenant = 'zpoison' THEN RAISE EXCEPTION 'poisoned batch'; END IF;
    RETURN NEW;
END $$`,
		`CREATE TRIGGER refuse_poison BEFORE INSERT ON allot_usage FOR EACH ROW EXECUTE FUNCTION refuse_poison()`,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name   string
		poison int // the batch refused, of 0 to 4
	}{
		{"the first", 0},
		{"one in the middle", 2},
		{"the last", 4},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			from, err := s.Position(ctx, "eu-1")
			if err != nil {
				t.Fatal(err)
			}
			before := sumUsage(t, dsn)
			p := pipe(t, s, from)
			for b := range 5 {
				lines := batch(hour(10*i+b), 20)
				if b == tt.poison {
					lines[len(lines)-1].Tenant = "zpoison" // still the last in order
				}
				if err := p.Send(lines); err != nil {
					t.Fatal(err)
				}
			}
			var good ledger.Position
			for b := range 5 {
				r := p.Wait()
				switch {
				case b < tt.poison && r.Err != nil:
					t.Fatalf("batch %d, before the refused one: %v", b, r.Err)
				case b < tt.poison:
					good = r.Position
				case b == tt.poison && (r.Err == nil || !strings.Contains(r.Err.Error(), "poisoned batch")):
					t.Fatalf("the refused batch %d: %v, want the trigger's error", b, r.Err)
				case b > tt.poison && r.Err == nil:
					t.Fatalf("batch %d, behind the refused one, committed at %+v", b, r.Position)
				}
			}
			if !good.Set {
				good = from
			}
			if got, err := s.Position(ctx, "eu-1"); err != nil || got != good {
				t.Errorf("Position = %+v, %v; want the last good batch's %+v", got, err, good)
			}
			want := before
			want.Rows += int64(20 * tt.poison)
			want.Admitted += int64(20 * tt.poison)
			if got := sumUsage(t, dsn); got != want {
				t.Errorf("allot_usage holds %+v, want %+v: the good batches' lines once, no other", got, want)
			}
		})
	}
}

// TestPipelineLosesToAnotherWriter: a writer that moves the position
// while a pipeline's batches are in flight (a second leader) makes them
// all fail as moved or behind a failure, and none counts twice.
func TestPipelineLosesToAnotherWriter(t *testing.T) {
	s, dsn := migrated(t)
	ctx := ctxFor(t, time.Minute)
	other := open(t, dsn)
	from, err := s.Write(ctx, "eu-1", ledger.Position{}, batch(hour(0), 5))
	if err != nil {
		t.Fatal(err)
	}
	// The other writer exports the next windows first, the second with
	// fewer lines: no batch of the pipeline is read after a position it
	// leaves. (One that is, with the same last key and count, is a batch
	// after the stored position, and commits, as Write's would.)
	pos := from
	for b, n := range []int{30, 25} {
		if pos, err = other.Write(ctx, "eu-1", pos, batch(hour(b+1), n)); err != nil {
			t.Fatal(err)
		}
	}
	p := pipe(t, s, from)
	for b := 1; b <= 3; b++ {
		if err := p.Send(batch(hour(b), 30)); err != nil {
			t.Fatal(err)
		}
	}
	for b := 1; b <= 3; b++ {
		r := p.Wait()
		if r.Err == nil {
			t.Fatalf("batch %d committed at %+v after another writer moved the position", b, r.Position)
		}
		if b == 1 && !errors.Is(r.Err, ledgersink.ErrPositionMoved) {
			t.Errorf("the first batch: %v, want ErrPositionMoved", r.Err)
		}
	}
	if got, err := s.Position(ctx, "eu-1"); err != nil || got != pos {
		t.Errorf("Position = %+v, %v; want the other writer's %+v", got, err, pos)
	}
	if got := sumUsage(t, dsn); got != (totals{Rows: 60, Admitted: 60}) {
		t.Errorf("allot_usage holds %+v, want the 60 lines written once", got)
	}
}

// TestPipelineRefusesBadBatches: a batch not after the tail is refused
// before anything is sent, and the tail stays.
func TestPipelineRefusesBadBatches(t *testing.T) {
	s, _ := migrated(t)
	p := pipe(t, s, ledger.Position{})
	if err := p.Send(batch(hour(1), 3)); err != nil {
		t.Fatal(err)
	}
	tail := p.Tail()
	for _, lines := range [][]ledger.Line{nil, batch(hour(0), 3), batch(hour(1), 3)} {
		if err := p.Send(lines); !errors.Is(err, ledgersink.ErrBadBatch) {
			t.Errorf("Send(%d lines) = %v, want ErrBadBatch", len(lines), err)
		}
	}
	if p.Tail() != tail || p.Len() != 1 {
		t.Errorf("after refused batches: Tail %+v, Len %d; want %+v, 1", p.Tail(), p.Len(), tail)
	}
	if r := p.Wait(); r.Err != nil {
		t.Fatal(r.Err)
	}
	if r := p.Wait(); r.Err == nil {
		t.Error("Wait with nothing in flight returned no error")
	}
}
