package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/allot-io/allot/internal/fleet"
)

// The storage phases do to a member's disk what disks do: pages
// overwritten, a file truncated, a snapshot damaged, the whole data dir
// lost while the others are out of reach, the disk full, and a quorum lost
// for good. Each checks what the operator sees (docs/operations.md has the
// runbook for each), follows the runbook, and leaves the cluster of three
// voters; the run's ledger check then covers every phase.

// storageConfig says which storage phases run.
type storageConfig struct {
	damagedPages, truncated, damagedSnapshot, lostDisk, diskFull, lostQuorum bool
	// lostDiskHold is how long the member that lost its disk runs while
	// the others are stopped, never leading.
	lostDiskHold time.Duration
	// fullHold is how long the full disk stays full.
	fullHold time.Duration
}

func allStorage() storageConfig {
	return storageConfig{damagedPages: true, truncated: true, damagedSnapshot: true, lostDisk: true, diskFull: true, lostQuorum: true,
		lostDiskHold: 15 * time.Second, fullHold: 10 * time.Second}
}

func (s storageConfig) any() bool {
	return s.damagedPages || s.truncated || s.damagedSnapshot || s.lostDisk || s.diskFull || s.lostQuorum
}

// storagePhases runs the phases the configuration asks for.
func (h *harness) storagePhases(ctx context.Context) error {
	sc := h.cfg.storage
	for _, p := range []struct {
		on         bool
		kind, name string
		run        func(context.Context) error
	}{
		{sc.damagedPages, "damaged-store", "pages of a member's raft.db overwritten", func(ctx context.Context) error { return h.damagedStore(ctx, damagePages) }},
		{sc.truncated, "damaged-store", "a member's raft.db truncated", func(ctx context.Context) error { return h.damagedStore(ctx, truncate) }},
		{sc.damagedSnapshot, "damaged-snapshot", "a member's newest snapshot damaged", h.damagedSnapshot},
		{sc.lostDisk, "lost-disk", "the leader's data dir lost while the others are stopped", h.lostDisk},
		{sc.diskFull, "disk-full", "a member's disk full", h.diskFull},
		{sc.lostQuorum, "lost-quorum", "two members lost for good: recover the third", h.lostQuorum},
	} {
		if !p.on {
			continue
		}
		h.log.logf("phase: %s", p.name)
		end := h.fault(p.kind)
		err := p.run(ctx)
		end()
		if err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		if err := h.cl.WaitVoters(ctx, len(h.cl.Coords), 90*time.Second); err != nil {
			return fmt.Errorf("%s: the cluster did not get its three voters back: %w", p.name, err)
		}
		if err := fleet.Sleep(ctx, h.cfg.killGap); err != nil {
			return err
		}
	}
	return nil
}

// follower returns a running member that does not lead.
func (h *harness) follower(ctx context.Context) (*fleet.Coordinator, error) {
	leader, err := h.cl.WaitLeader(ctx, 60*time.Second)
	if err != nil {
		return nil, err
	}
	for _, co := range h.cl.Coords {
		if co != leader && co.Running() {
			return co, nil
		}
	}
	return nil, errors.New("no follower running")
}

// damage is a way of damaging raft.db.
type damage func(path string) (string, error)

// damagePages overwrites the root bucket's page and the freelist page
// with random bytes: a bad sector, or a bad restore.
func damagePages(path string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	// The meta in use is the one with the higher transaction ID; the
	// other's pages may be free by now, and damage to free pages is
	// harmless.
	le := binary.LittleEndian
	meta := make([]byte, 64)
	if _, err := f.ReadAt(meta, 16); err != nil {
		return "", err
	}
	pageSize := int64(le.Uint32(meta[8:]))
	other := make([]byte, 64)
	if _, err := f.ReadAt(other, pageSize+16); err != nil {
		return "", err
	}
	if le.Uint64(other[48:]) > le.Uint64(meta[48:]) {
		meta = other
	}
	root, freelist := int64(le.Uint64(meta[16:])), int64(le.Uint64(meta[32:]))
	junk := make([]byte, pageSize)
	r := rand.New(rand.NewPCG(uint64(root), uint64(freelist)))
	for _, p := range []int64{root, freelist} {
		for i := range junk {
			junk[i] = byte(r.Uint32())
		}
		if _, err := f.WriteAt(junk, p*pageSize); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("overwrote pages %d (root bucket) and %d (freelist) of %d bytes", root, freelist, pageSize), nil
}

// truncate cuts raft.db to half its size: a copy taken while in use.
func truncate(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if err := os.Truncate(path, st.Size()/2); err != nil {
		return "", err
	}
	return fmt.Sprintf("truncated from %d to %d bytes", st.Size(), st.Size()/2), nil
}

// damagedStore SIGKILLs a follower, damages its raft.db, and starts it:
// it must exit at once with one line naming the file and the runbook,
// without a panic or a fault, and leave the file as it found it. Then the
// runbook: the damaged store and snapshots moved aside (the identity
// kept, so the member knows it lost its state), the member started with
// the same flags, rejoining from the leader.
func (h *harness) damagedStore(ctx context.Context, how damage) error {
	f, err := h.follower(ctx)
	if err != nil {
		return err
	}
	f.Kill()
	db := filepath.Join(f.DataDir, "raft.db")
	what, err := how(db)
	if err != nil {
		return err
	}
	h.log.logf("SIGKILLed follower %s; %s", f.ID, what)
	before, err := fileSum(db)
	if err != nil {
		return err
	}
	out, err := startAndExpectExit(f, 30*time.Second)
	if err != nil {
		return err
	}
	if err := oneLineRefusal(out, "raft.db is damaged", "docs/operations.md#runbook-a-corrupt-raft-store"); err != nil {
		return fmt.Errorf("%s: %w", f.ID, err)
	}
	if after, err := fileSum(db); err != nil || !bytes.Equal(before, after) {
		return fmt.Errorf("%s changed %s while refusing it (%v)", f.ID, db, err)
	}
	h.log.logf("%s refused to start, as it should: %s", f.ID, lastRefusal(out))
	if err := moveAside(f.DataDir, "raft.db", "snapshots"); err != nil {
		return err
	}
	h.log.logf("runbook: moved raft.db and snapshots/ aside, kept identity.json; restarting %s with the same flags", f.ID)
	return h.cl.Restart(ctx, f)
}

// damagedSnapshot damages a follower's newest snapshot: it starts from
// the older one, says so, and replays the log.
func (h *harness) damagedSnapshot(ctx context.Context) error {
	f, err := h.follower(ctx)
	if err != nil {
		return err
	}
	var snaps []string
	err = fleet.Poll(ctx, 3*time.Minute, f.ID+" to hold two snapshots", func() (bool, error) {
		snaps, err = snapshotDirs(f.DataDir)
		return len(snaps) >= 2, err
	})
	if err != nil {
		return err
	}
	f.Kill()
	state := filepath.Join(snaps[0], "state.bin")
	b, err := os.ReadFile(state)
	if err != nil {
		return err
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(state, b, 0o600); err != nil {
		return err
	}
	h.log.logf("SIGKILLed follower %s; flipped a byte in its newest snapshot %s", f.ID, filepath.Base(snaps[0]))
	mark, _ := logSize(f.LogPath)
	if err := h.cl.Restart(ctx, f); err != nil {
		return err
	}
	out := readFrom(f.LogPath, mark)
	if !strings.Contains(out, "falling back to the older") {
		return fmt.Errorf("%s started without saying it fell back from the damaged snapshot (see %s)", f.ID, f.LogPath)
	}
	h.log.logf("%s fell back to the older snapshot, as it should: %s", f.ID, grepLine(out, "falling back"))
	return nil
}

// lostDisk is the case of a StatefulSet's pod given a new volume: the
// leader SIGKILLed, its data dir removed, and started again with the same
// flags while the other two are stopped (SIGSTOP: out of reach). It must
// never lead, never bootstrap and never answer a report; once the others
// are back it rejoins them.
func (h *harness) lostDisk(ctx context.Context) error {
	leader, err := h.cl.WaitLeader(ctx, 60*time.Second)
	if err != nil {
		return err
	}
	leader.Kill()
	if err := emptyDir(leader.DataDir); err != nil {
		return err
	}
	var others []*fleet.Coordinator
	for _, co := range h.cl.Coords {
		if co != leader {
			others = append(others, co)
			if err := co.Signal(syscall.SIGSTOP); err != nil {
				return err
			}
		}
	}
	h.log.logf("SIGKILLed leader %s, removed its data dir, SIGSTOPped %s and %s; restarting %s with the same flags", leader.ID, others[0].ID, others[1].ID, leader.ID)
	resume := func() {
		for _, co := range others {
			_ = co.Signal(syscall.SIGCONT)
		}
	}
	defer resume()
	if err := leader.Start(); err != nil {
		return err
	}
	if err := h.cl.WaitHTTP(ctx, leader.Proc, leader.URL("/healthz"), 60*time.Second); err != nil {
		return err
	}
	deadline := time.Now().Add(h.cfg.storage.lostDiskHold)
	polls := 0
	for time.Now().Before(deadline) {
		st, err := h.cl.Status(ctx, leader)
		if err == nil {
			polls++
			if st.State == "Leader" || st.LeaderID != "" {
				return fmt.Errorf("%s, with no data and the others stopped, has a leader (%s, state %s): a second cluster", leader.ID, st.LeaderID, st.State)
			}
		}
		if ok, _ := h.cl.ReportsAnswered(ctx, leader); ok > 0 {
			return fmt.Errorf("%s answered %v reports with no data: a second cluster", leader.ID, ok)
		}
		if err := fleet.Sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
	h.log.logf("%s ran %v with no data and the others stopped: never a leader (%d status polls), no report answered", leader.ID, h.cfg.storage.lostDiskHold, polls)
	resume()
	h.log.logf("SIGCONT %s and %s; %s rejoins them", others[0].ID, others[1].ID, leader.ID)
	return nil
}

// diskFull fills a member's tmpfs data dir (mounted at setup when running
// as root) to ENOSPC, first making it the leader, holds it full under
// load, and frees it: the member steps down and keeps running, and the
// ledger stays exact.
func (h *harness) diskFull(ctx context.Context) error {
	co := h.cl.Coords[h.fullMember]
	if !h.tmpfs {
		h.log.logf("skipped: a full disk needs a small tmpfs as %s's data dir, which needs root (running as uid %d)", co.ID, os.Geteuid())
		return nil
	}
	for range 4 {
		leader, err := h.cl.WaitLeader(ctx, 60*time.Second)
		if err != nil {
			return err
		}
		if leader == co {
			break
		}
		if err := h.cl.KillLeader(ctx, time.Second); err != nil {
			return err
		}
	}
	filler := filepath.Join(co.DataDir, "filler")
	n, err := fill(filler)
	if err != nil {
		return err
	}
	st, _ := h.cl.Status(ctx, co)
	role := "?"
	if st != nil {
		role = st.State
	}
	h.log.logf("filled %s's data dir to ENOSPC (%d MiB of filler) while it was %s; holding %v", co.ID, n>>20, role, h.cfg.storage.fullHold)
	if err := fleet.Sleep(ctx, h.cfg.storage.fullHold); err != nil {
		return err
	}
	if !co.Running() {
		return fmt.Errorf("%s exited on a full disk (see %s)", co.ID, co.LogPath)
	}
	st, _ = h.cl.Status(ctx, co)
	if st != nil {
		h.log.logf("%s with a full disk: state %s, leader %s", co.ID, st.State, st.LeaderID)
	}
	if err := os.Remove(filler); err != nil {
		return err
	}
	// Every snapshot Raft tried while the disk was full failed; none may
	// have left its unfinished directory (one may be in progress now).
	left, _ := filepath.Glob(filepath.Join(co.DataDir, "snapshots", "*.tmp"))
	h.log.logf("freed %s's disk; %d unfinished snapshot directories in it", co.ID, len(left))
	if len(left) > 1 {
		return fmt.Errorf("%s kept %d unfinished snapshots from the full disk (%v): each takes space the outage's end freed", co.ID, len(left), left)
	}
	return nil
}

// fill writes zeros to path until the disk is full and returns how much.
func fill(path string) (int64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	var n int64
	for {
		w, err := f.Write(buf)
		n += int64(w)
		if errors.Is(err, syscall.ENOSPC) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// lostQuorum SIGKILLs the leader and a follower at once and removes their
// data dirs: the third member alone cannot elect a leader. It is stopped,
// inspected, recovered with `allot cluster recover`, started alone, and
// two members with fresh data dirs join it. Units the lost members had
// committed in entries the survivor never received may be missing from
// the ledger: the lost members' logs, read before they are removed, bound
// them, and the run's verdict allows that many.
func (h *harness) lostQuorum(ctx context.Context) error {
	leader, err := h.cl.WaitLeader(ctx, 60*time.Second)
	if err != nil {
		return err
	}
	var survivor *fleet.Coordinator
	var lost []*fleet.Coordinator
	for _, co := range h.cl.Coords {
		if co != leader && survivor == nil {
			survivor = co
			continue
		}
		lost = append(lost, co)
	}
	// The survivor is paused first, so that the lost members commit
	// entries it never receives: the loss the verdict allows is then
	// exercised on every run, not only when the survivor lags by chance.
	if err := survivor.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	if err := fleet.Sleep(ctx, 2*time.Second); err != nil {
		return err
	}
	// RLQS has no acknowledgement: what Envoys report to the survivor
	// while it cannot commit is lost when it stops, and allowed.
	before := h.envoys.reported()
	for _, co := range lost {
		co.Kill()
	}
	if err := survivor.Signal(syscall.SIGCONT); err != nil {
		return err
	}
	h.log.logf("SIGSTOPped follower %s for 2s, then SIGKILLed leader %s and follower %s at once; %s alone has no quorum and misses what they committed meanwhile", survivor.ID, lost[0].ID, lost[1].ID, survivor.ID)
	if err := fleet.Sleep(ctx, 2*time.Second); err != nil {
		return err
	}
	survivor.Kill()
	if during := h.envoys.reported() - before; during > 0 {
		h.rlqsAllowed += during
		h.log.logf("the Envoys reported %d allowed while no member could commit: RLQS has no acknowledgement to re-send them by", during)
	}
	bin := survivor.Bin
	self, err := inspect(ctx, bin, survivor, 0)
	if err != nil {
		return err
	}
	allowed := new(big.Int)
	var envoysLost uint64
	for _, co := range lost {
		in, err := inspect(ctx, bin, co, self.LastIndex)
		if err != nil {
			return err
		}
		// The Envoys' units are judged apart (envoyVerdict): what their
		// streams reported to the lost members while the survivor was
		// paused, committed without it, is theirs to lose. Counted among
		// the agents' only, a run failed whose RLQS streams happened to
		// report in that pause (1,540 lost of a bound of 598 + 912).
		var adm, den, envoys uint64
		for _, u := range in.Usage {
			if u.Tenant == envoyTenant && u.Rule == envoyRule {
				envoys += u.Admitted
				continue
			}
			adm, den = adm+u.Admitted, den+u.Denied
		}
		h.log.logf("%s's log runs to %d (term %d): %d report entries after the survivor's %d, carrying %d admitted and %d denied units, and %d the Envoys admitted", co.ID, in.LastIndex, in.LastTerm, in.Entries, self.LastIndex, adm, den, envoys)
		if b := new(big.Int).SetUint64(adm + den); b.Cmp(allowed) > 0 {
			allowed = b
		}
		envoysLost = max(envoysLost, envoys)
		if err := emptyDir(co.DataDir); err != nil {
			return err
		}
	}
	h.lostAllowed.Add(h.lostAllowed, allowed)
	h.rlqsUnreceived += envoysLost
	rec := exec.CommandContext(ctx, bin, "cluster", "recover", "--log-level", "warn", "--data-dir", survivor.DataDir, "--node-id", survivor.ID)
	var stderr bytes.Buffer
	rec.Stderr = &stderr
	out, err := rec.Output()
	if err != nil {
		return fmt.Errorf("allot cluster recover: %v: %s%s", err, out, stderr.Bytes())
	}
	h.log.logf("removed %s's and %s's data dirs; %s", lost[0].ID, lost[1].ID, strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0]))
	if err := survivor.Start(); err != nil {
		return err
	}
	if _, err := h.cl.WaitLeader(ctx, 60*time.Second); err != nil {
		return err
	}
	for _, co := range lost {
		if err := co.Start(); err != nil {
			return err
		}
	}
	h.log.logf("%s leads alone; %s and %s started with fresh data dirs and the same flags", survivor.ID, lost[0].ID, lost[1].ID)
	return nil
}

// inspection is the part of `allot cluster inspect --format json` read.
type inspection struct {
	LastIndex uint64
	LastTerm  uint64
	Entries   int
	Usage     []struct {
		Rule, Tenant     string
		Admitted, Denied uint64
	}
}

func inspect(ctx context.Context, bin string, co *fleet.Coordinator, after uint64) (*inspection, error) {
	out, err := exec.CommandContext(ctx, bin, "cluster", "inspect", "--format", "json", "--data-dir", co.DataDir, "--node-id", co.ID, "--after", fmt.Sprint(after)).Output()
	if err != nil {
		return nil, fmt.Errorf("allot cluster inspect %s: %v", co.ID, err)
	}
	var in inspection
	if err := json.Unmarshal(out, &in); err != nil {
		return nil, fmt.Errorf("allot cluster inspect %s: %w", co.ID, err)
	}
	return &in, nil
}

// startAndExpectExit starts a member that must refuse to run, and returns
// what it wrote.
func startAndExpectExit(co *fleet.Coordinator, within time.Duration) (string, error) {
	mark, _ := logSize(co.LogPath)
	if err := co.Start(); err != nil {
		return "", err
	}
	exited, err := co.Wait(within)
	out := readFrom(co.LogPath, mark)
	if !exited {
		co.Kill()
		return out, fmt.Errorf("%s started on a damaged store instead of refusing it (see %s)", co.ID, co.LogPath)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		return out, fmt.Errorf("%s exited with %v on a damaged store, want status 3 (refused: do not restart)", co.ID, err)
	}
	return out, nil
}

// oneLineRefusal checks a refusal: one error line with what and the
// runbook, and no panic, fault or stack trace.
func oneLineRefusal(out, what, runbook string) error {
	for _, bad := range []string{"panic:", "fatal error", "SIGBUS", "SIGSEGV", "goroutine "} {
		if strings.Contains(out, bad) {
			return fmt.Errorf("its output has %q:\n%s", bad, clip(out, 2000))
		}
	}
	line := lastRefusal(out)
	if !strings.Contains(line, what) || !strings.Contains(line, runbook) {
		return fmt.Errorf("its last line is not one error naming %q and %s: %q", what, runbook, line)
	}
	return nil
}

func lastRefusal(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}

func grepLine(out, s string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) {
			return clip(strings.TrimSpace(l), 300)
		}
	}
	return ""
}

func fileSum(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s := sha256.Sum256(b)
	return s[:], nil
}

// emptyDir removes everything in dir (which may be a mount point).
func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// moveAside renames the named entries of dir to NAME.damaged-TIME.
func moveAside(dir string, names ...string) error {
	stamp := time.Now().Format("20060102T150405")
	for _, n := range names {
		p := filepath.Join(dir, n)
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err := os.Rename(p, p+".damaged-"+stamp); err != nil {
			return err
		}
	}
	return nil
}

// snapshotDirs lists a data dir's snapshots, newest first.
func snapshotDirs(dir string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(dir, "snapshots"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasSuffix(e.Name(), ".tmp") {
			out = append(out, filepath.Join(dir, "snapshots", e.Name()))
		}
	}
	// Names are term-index-millis: newest last in lexical order of the
	// zero-free numbers is not guaranteed; sort by meta instead.
	sort.Slice(out, func(i, j int) bool { return snapshotOrder(out[i]) > snapshotOrder(out[j]) })
	return out, nil
}

// snapshotOrder is a snapshot's (term, index) from its meta.json.
func snapshotOrder(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		return ""
	}
	var m struct{ Term, Index uint64 }
	if json.Unmarshal(b, &m) != nil {
		return ""
	}
	return fmt.Sprintf("%020d-%020d", m.Term, m.Index)
}

func logSize(path string) (int64, error) {
	st, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// readFrom reads a log file from offset on.
func readFrom(path string, off int64) string {
	b, err := os.ReadFile(path)
	if err != nil || off > int64(len(b)) {
		return ""
	}
	return string(b[off:])
}
