package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/allot-io/allot/internal/fleet"
)

// blockedExport is the export transaction sink-kill-mid-tx holds up: a
// backend of the sink's database waiting on a lock the harness holds.
type blockedExport struct {
	pid, clientPort  int
	waitType, wait   string
	state, query     string
	xactAge, waitAge float64
}

func (b *blockedExport) String() string {
	return fmt.Sprintf("backend %d (client port %d) %s, waiting on %s/%s for %.1fs in a transaction open %.1fs: %s",
		b.pid, b.clientPort, b.state, b.waitType, b.wait, b.waitAge, b.xactAge, b.query)
}

// findBlocked looks, from a connection of its own (pg_stat_activity is
// read once per transaction), for a client backend of the sink's database
// whose statement writing allot_usage (a COPY straight into it, or the
// upsert from a staging table) waits on a Lock held by the backend
// holder.
func (s *sinkDB) findBlocked(ctx context.Context, holder uint32) (*blockedExport, error) {
	conn, err := s.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	var b blockedExport
	err = conn.QueryRow(ctx, `SELECT pid, coalesce(client_port, -1), wait_event_type, wait_event, state,
    left(regexp_replace(query, '\s+', ' ', 'g'), 60),
    extract(epoch FROM now() - xact_start)::float8, extract(epoch FROM now() - state_change)::float8
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'
  AND wait_event_type = 'Lock' AND query ILIKE '%allot_usage%'
  AND $1::int = ANY (pg_blocking_pids(pid))
ORDER BY xact_start LIMIT 1`, int(holder)).Scan(&b.pid, &b.clientPort, &b.waitType, &b.wait, &b.state, &b.query, &b.xactAge, &b.waitAge)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading pg_stat_activity: %w", err)
	}
	return &b, nil
}

// backendGone reports whether backend pid has left pg_stat_activity.
func (s *sinkDB) backendGone(ctx context.Context, pid int) (bool, error) {
	conn, err := s.connect(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&n); err != nil {
		return false, fmt.Errorf("reading pg_stat_activity: %w", err)
	}
	return n == 0, nil
}

// killMidTx SIGKILLs the leader while its export transaction is open.
// The harness takes a SHARE lock on allot_usage, which the export's write
// into it (ROW EXCLUSIVE: a COPY straight into the table, or the upsert
// from the staging table its batch was COPYed into) waits behind: by then
// the first of the leader's transactions in flight has locked the
// cluster's position row (those behind it copy before they lock). Once
// pg_stat_activity shows it waiting, the leader is SIGKILLed, the lock
// released, and the killed member restarted after -kill-down. Its
// transaction must roll back: the ledger check at the end finds any of
// its lines counted twice, or lost.
func (h *harness) killMidTx(ctx context.Context) error {
	leader, err := h.cl.WaitLeader(ctx, 60*time.Second)
	if err != nil {
		return err
	}
	conn, err := h.sink.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("BEGIN: %w", err)
	}
	defer tx.Rollback(context.Background()) // a no-op once rolled back below
	if _, err := tx.Exec(ctx, `LOCK TABLE allot_usage IN SHARE MODE`); err != nil {
		return fmt.Errorf("LOCK TABLE allot_usage IN SHARE MODE: %w", err)
	}
	// No batch commits while the lock is held: every one writes
	// allot_usage. Read in the lock's transaction, this is the position
	// the killed transaction was read after.
	before, err := readPosition(ctx, conn, h.cluster)
	if err != nil {
		return err
	}
	holder := conn.PgConn().PID()
	// The next window's lines are final a little after it ends: an
	// export comes within a window, and then some.
	deadline := h.cfg.billingWindow + 30*time.Second
	h.log.logf("sink-kill-mid-tx: backend %d holds SHARE on allot_usage (position: %v); waiting up to %v for leader %s's export to block on it",
		holder, before, deadline, leader.ID)
	var blocked *blockedExport
	err = fleet.Poll(ctx, deadline, "an export transaction waiting on the harness's lock", func() (bool, error) {
		b, err := h.sink.findBlocked(ctx, holder)
		blocked = b
		return b != nil, err
	})
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		if rerr := tx.Rollback(ctx); rerr != nil {
			return rerr
		}
		h.problem("sink-kill-mid-tx: %v: the leader never exported while the lock was held", err)
		return nil
	}
	h.log.logf("sink-kill-mid-tx: seen %v", blocked)
	victim := h.socketOwner(blocked.clientPort)
	switch {
	case victim == nil:
		h.log.logf("sink-kill-mid-tx: no coordinator found holding client port %d; killing leader %s", blocked.clientPort, leader.ID)
		victim = leader
	case victim != leader:
		h.log.logf("sink-kill-mid-tx: WARNING: the blocked transaction is %s's, not leader %s's; killing %s", victim.ID, leader.ID, victim.ID)
	default:
		h.log.logf("sink-kill-mid-tx: client port %d is leader %s's (pid %d)", blocked.clientPort, victim.ID, victim.Pid())
	}
	h.log.logf("SIGKILL leader %s with its export transaction open", victim.ID)
	if err := victim.Kill(); err != nil {
		return err
	}
	if err := tx.Rollback(ctx); err != nil {
		return fmt.Errorf("ROLLBACK of the lock: %w", err)
	}
	h.log.logf("sink-kill-mid-tx: lock released (ROLLBACK)")
	err = fleet.Poll(ctx, 30*time.Second, "the killed leader's backend to end", func() (bool, error) {
		return h.sink.backendGone(ctx, blocked.pid)
	})
	if err != nil {
		h.problem("sink-kill-mid-tx: %v", err)
	}
	after, err := h.sink.position(ctx, h.cluster)
	if err != nil {
		return err
	}
	h.log.logf("sink-kill-mid-tx: backend %d ended, its transaction rolled back; position under the lock %v, now %v", blocked.pid, before, after)
	next, err := h.cl.WaitLeader(ctx, 60*time.Second)
	if err != nil {
		return err
	}
	_, term := h.cl.FindLeader(ctx)
	h.log.logf("new leader %s (term %d); %s down for %v", next.ID, term, victim.ID, h.cfg.killDown)
	if err := fleet.Sleep(ctx, h.cfg.killDown); err != nil {
		return err
	}
	if err := h.cl.Restart(ctx, victim); err != nil {
		return fmt.Errorf("restarting %s: %w", victim.ID, err)
	}
	h.log.logf("%s restarted with its data", victim.ID)
	return nil
}

// socketOwner is the coordinator holding the TCP connection whose local
// port is port (a backend's client_port), found in /proc: the socket's
// inode in /proc/net/tcp, then among each coordinator's open files. It is
// nil when none is found.
func (h *harness) socketOwner(port int) *fleet.Coordinator {
	if port <= 0 {
		return nil
	}
	inode := tcpInode(port)
	if inode == "" {
		return nil
	}
	want := "socket:[" + inode + "]"
	for _, co := range h.cl.Coords {
		pid := co.Pid()
		if pid == 0 {
			continue
		}
		dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if link, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && link == want {
				return co
			}
		}
	}
	return nil
}

// tcpInode finds the inode of the established TCP socket whose local port
// is port, in /proc/net/tcp and tcp6; "" when there is none.
func tcpInode(port int) string {
	suffix := fmt.Sprintf(":%04X", port)
	for _, name := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(name)
		if err != nil {
			continue
		}
		in := bufio.NewScanner(f)
		for in.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			fields := strings.Fields(in.Text())
			if len(fields) > 9 && strings.HasSuffix(fields[1], suffix) && fields[3] == "01" {
				f.Close()
				return fields[9]
			}
		}
		f.Close()
	}
	return ""
}
