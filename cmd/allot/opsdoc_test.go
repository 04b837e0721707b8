package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestOperationsDocExamples runs docs/operations.md's commands on loopback
// as the page tells them: three members formed with --bootstrap-expect,
// allot status, a backup and a restore refused then forced, a member
// removed (which stops), a member whose raft.db is damaged (which refuses
// to start), the quorum thereby lost, allot cluster inspect and allot
// cluster recover; and checks that every output the page shows is what
// they print.
func TestOperationsDocExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster of three allot processes")
	}
	t.Parallel() // its own processes, ports and directories: see TestMain
	doc := readDocOutputs(t, "../../docs/operations.md")
	seen := map[string]bool{}
	env := cliEnv()
	addrs := loopbackAddrs(t, 9)
	grpcs := []string{addrs[1], addrs[4], addrs[7]}
	join := strings.Join(grpcs, ",")
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	args := func(i int) []string {
		return []string{"coordinator", "--node-id", fmt.Sprintf("c%d", i+1), "--data-dir", dirs[i], "--region", "eu-west",
			"--raft-addr", addrs[3*i], "--grpc-addr", addrs[3*i+1], "--http-addr", addrs[3*i+2],
			"--bootstrap-expect", "3", "--join", join}
	}
	var procs []*process
	for i := range 3 {
		procs = append(procs, startProcess(t, env, fmt.Sprintf("c%d", i+1), args(i)...))
	}
	status := func(addr string) (int, string) {
		code, out, errOut := runAllot(t, env, "status", "--coordinator", addr)
		return code, out + errOut
	}
	eventually(t, "three voters", procs, func() (bool, string) {
		code, out := status(grpcs[1])
		return code == 0 && strings.Count(out, " yes ") == 3 && regexp.MustCompile(`leader c\d at`).MatchString(out) &&
			!strings.Contains(out, "unknown") && !strings.Contains(out, "not yet recorded") && strings.Count(out, "127.0.0.1:") == 10, out
	})
	_, out := status(grpcs[1])
	checkDocOutput(t, doc, "status", out, seen)

	rules := writeTemp(t, "rules.yaml", "rules:\n  - {name: plan-quota, scope: tenant, algorithm: fixed_window, limit: 5, period: 1m, intent: quota}\n")
	if code, o, e := runAllot(t, env, "rules", "put", "--coordinator", grpcs[0], rules); code != 0 {
		t.Fatalf("rules put: %d %s%s", code, o, e)
	}
	work := t.TempDir()
	runIn := func(args ...string) (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), cliDeadline)
		defer cancel()
		cmd := exec.CommandContext(ctx, allotBinary(t), args...)
		cmd.Env, cmd.Dir = env, work
		var b bytes.Buffer
		cmd.Stdout, cmd.Stderr = &b, &b
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return cmd.ProcessState.ExitCode(), b.String()
	}
	if code, o := runIn("cluster", "backup", "--coordinator", grpcs[0], "b.snap"); code != 0 {
		t.Fatalf("backup: %s", o)
	}
	code, o := runIn("cluster", "restore", "--coordinator", grpcs[0], "b.snap")
	if code == 0 {
		t.Fatalf("restore into a cluster with state was not refused: %s", o)
	}
	checkDocOutput(t, doc, "restore-refused", o, seen)
	cid := regexp.MustCompile(`--force ([0-9a-f]{32})`).FindStringSubmatch(o)
	if cid == nil {
		t.Fatalf("the refusal names no cluster ID: %s", o)
	}
	if code, o = runIn("cluster", "restore", "--coordinator", grpcs[0], "--force", cid[1], "b.snap"); code != 0 {
		t.Fatalf("forced restore: %s", o)
	}
	checkDocOutput(t, doc, "restore", o, seen)

	// Remove a follower: it stops with status 3.
	leader := regexp.MustCompile(`leader (c\d)`).FindStringSubmatch(out)[1]
	victim := 2
	if leader == "c3" {
		victim = 1
	}
	code, o = runIn("cluster", "remove", "--coordinator", grpcs[0], fmt.Sprintf("c%d", victim+1))
	if code != 0 {
		t.Fatalf("remove: %s", o)
	}
	checkDocOutput(t, doc, "remove", o, seen)
	select {
	case <-procs[victim].done:
	case <-time.After(cliDeadline):
		t.Fatal("the removed member did not stop")
	}
	if c := procs[victim].cmd.ProcessState.ExitCode(); c != 3 {
		t.Fatalf("the removed member exited with %d, want 3", c)
	}
	removed := procs[victim].out.String()
	if lineWith(removed, "[ERROR]", "must be stopped") == "" {
		t.Fatalf("the removed member said nothing at ERROR:\n%s", removed)
	}
	checkDocOutput(t, doc, "removed-log", lineWith(removed, "[ERROR]", "must be stopped"), seen)

	// Restarted with its old data, it is refused again and stops.
	code, o, e := runAllot(t, env, args(victim)...)
	if code != 3 || !strings.Contains(o+e, "must be stopped") {
		t.Fatalf("the removed member restarted with its old data: exit %d\n%s%s", code, o, e)
	}

	// Add it back: an empty data dir, the same flags. It joins without a
	// vote and is promoted once it has caught up.
	if err := os.RemoveAll(dirs[victim]); err != nil {
		t.Fatal(err)
	}
	procs[victim] = startProcess(t, env, fmt.Sprintf("c%d", victim+1), args(victim)...)
	eventually(t, "the member added back to be a voter", procs, func() (bool, string) {
		code, out := status(grpcs[0])
		return code == 0 && strings.Count(out, " yes ") == 3 && !strings.Contains(out, "unknown") &&
			lineWith(procs[victim].out.String(), "a voting member of the cluster") != "", out
	})
	li := int(leader[1] - '1')
	checkDocOutput(t, doc, "add-member", strings.Join([]string{
		lineWith(procs[li].out.String(), "adding a member without a vote"),
		lineWith(procs[victim].out.String(), "added to the cluster without a vote"),
		lineWith(procs[li].out.String(), "promoting a member that has caught up"),
		lineWith(procs[victim].out.String(), "a voting member of the cluster"),
	}, "\n"), seen)

	// Damage a follower's raft.db: it refuses to start.
	other := (li + 1) % 3
	_ = procs[other].cmd.Process.Kill()
	<-procs[other].done
	damageRootAndFreelist(t, filepath.Join(dirs[other], "raft.db"))
	code, o, e = runAllot(t, env, args(other)...)
	if code != 3 {
		t.Fatalf("a damaged store started, or exited %d: %s%s", code, o, e)
	}
	checkDocOutput(t, doc, "corrupt", lineWith(e, "raft.db is damaged"), seen)

	// The third member lost too: the leader alone has no quorum.
	third := (li + 2) % 3
	_ = procs[third].cmd.Process.Kill()
	<-procs[third].done
	// Stop the leader, inspect it, recover it.
	procs[li].stop(t)
	code, o, e = runAllot(t, env, "cluster", "inspect", "--data-dir", dirs[li], "--node-id", leader)
	if code != 0 {
		t.Fatalf("inspect: %s%s", o, e)
	}
	checkDocOutput(t, doc, "inspect", o, seen)
	code, o, e = runAllot(t, env, "cluster", "recover", "--log-level", "warn", "--data-dir", dirs[li], "--node-id", leader)
	if code != 0 {
		t.Fatalf("recover: %s%s", o, e)
	}
	checkDocOutput(t, doc, "recover", o, seen)
	back := startProcess(t, env, leader, args(li)...)
	eventually(t, "the recovered member to lead alone", []*process{back}, func() (bool, string) {
		code, out := status(grpcs[li])
		return code == 0 && strings.Contains(out, "leader "+leader), out
	})
	requireDocOutputsSeen(t, "../../docs/operations.md", doc, seen)
}

// damageRootAndFreelist overwrites the pages of the bbolt meta in use that
// hold the root bucket and the freelist.
func damageRootAndFreelist(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	le := binary.LittleEndian
	meta := make([]byte, 64)
	if _, err := f.ReadAt(meta, 16); err != nil {
		t.Fatal(err)
	}
	pageSize := int64(le.Uint32(meta[8:]))
	other := make([]byte, 64)
	if _, err := f.ReadAt(other, pageSize+16); err != nil {
		t.Fatal(err)
	}
	if le.Uint64(other[48:]) > le.Uint64(meta[48:]) {
		meta = other
	}
	junk := bytes.Repeat([]byte{0xa5}, int(pageSize))
	for _, p := range []int64{int64(le.Uint64(meta[16:])), int64(le.Uint64(meta[32:]))} {
		if _, err := f.WriteAt(junk, p*pageSize); err != nil {
			t.Fatal(err)
		}
	}
}
