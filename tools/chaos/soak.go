package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/allot-io/allot/billing"
	"github.com/allot-io/allot/internal/fleet"
)

// The soak (make soak): steady traffic through the cluster for a long
// time, the leader SIGKILLed every few minutes, and every process sampled
// (resident memory, goroutines, open files; the coordinators' Raft files
// on disk). A run passes when the ledger is exact and every series levels
// off: what grows for as long as the process runs is a leak.

// soakConfig is the soak's part of the configuration.
type soakConfig struct {
	duration, killEvery, every time.Duration
	// snapshotThreshold, when set, is the coordinators'
	// --snapshot-threshold: a short soak needs the Raft log compacted
	// sooner than the default 8192 entries to reach its steady state.
	snapshotThreshold int
}

// soakSample is one process's state at one time.
type soakSample struct {
	at                   time.Duration // since the soak began
	rss, goroutines, fds float64
	raftBytes            float64 // coordinators: raft.db and snapshots/
	run                  int     // which run of the process (restarts count)
	leader               bool    // coordinators: it led when sampled
	// anon is the resident memory not backed by a file (RssAnon): the
	// process's own, without the pages of raft.db that bbolt maps.
	anon float64
	// streams is the Envoy (RLQS) streams a coordinator serves: each has
	// goroutines of its own, and streams move when a member dies.
	streams int
}

// soakSeries are one process's samples.
type soakSeries struct {
	name    string
	member  *fleet.Coordinator // nil for sidecars
	samples []soakSample
}

// exportedLines are the final ledger lines a billing job read: final
// windows never change, so keeping each once is the whole bill, even
// after retention deleted them from the coordinators. The zero value and
// nil hold none.
type exportedLines struct {
	mu    sync.Mutex
	lines map[[3]string]billing.JSONLine
	reads int
}

// export reads the ledger and keeps its final lines.
func (e *exportedLines) export(ctx context.Context, h *harness) error {
	var creds []string
	if h.cl.Creds != nil {
		creds = h.cl.Creds.ClientArgs()
	}
	var addrs []string
	for _, co := range h.cl.Coords {
		addrs = append(addrs, co.GRPC)
	}
	lines, err := readLedgerLines(ctx, h.cl.Coords[0].Bin, addrs, creds)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.lines == nil {
		e.lines = map[[3]string]billing.JSONLine{}
	}
	for _, l := range lines {
		if l.Final {
			e.lines[[3]string{l.Tenant, l.Rule, l.WindowStart}] = l
		}
	}
	e.reads++
	return nil
}

// with is current, plus the exported lines of windows no longer in it.
func (e *exportedLines) with(current []billing.JSONLine) []billing.JSONLine {
	if e == nil {
		return current
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	have := map[[3]string]bool{}
	for _, l := range current {
		have[[3]string{l.Tenant, l.Rule, l.WindowStart}] = true
	}
	out := current
	for k, l := range e.lines {
		if !have[k] {
			out = append(out, l)
		}
	}
	return out
}

// exportFinals reads the ledger every few seconds until ctx ends, as a
// billing job does, so that windows retention deletes are still counted.
func (h *harness) exportFinals(ctx context.Context) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		if err := h.exported.export(ctx, h); err != nil && ctx.Err() == nil {
			h.log.logf("billing export: %v (retried in 5 s)", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (h *harness) soak(ctx context.Context) error {
	sc := h.cfg.soak
	var series []*soakSeries
	for _, co := range h.cl.Coords {
		series = append(series, &soakSeries{name: co.ID, member: co})
	}
	for _, s := range h.cl.Sidecars {
		series = append(series, &soakSeries{name: s.ID})
	}
	procs := map[string]*fleet.Proc{}
	urls := map[string]string{}
	for _, co := range h.cl.Coords {
		procs[co.ID], urls[co.ID] = co.Proc, co.URL("/metrics")
	}
	for _, s := range h.cl.Sidecars {
		procs[s.ID], urls[s.ID] = s.Proc, s.URL("/metrics")
	}
	csvPath := filepath.Join(h.dir, "logs", "soak.csv")
	csv, err := os.Create(csvPath)
	if err != nil {
		return err
	}
	defer csv.Close()
	fmt.Fprintln(csv, "seconds,process,run,leader,rlqs_streams,rss_bytes,rss_anon_bytes,goroutines,open_fds,raft_bytes")
	h.log.logf("phase: soak for %v, the leader SIGKILLed every %v, every process sampled every %v (%s)", sc.duration, sc.killEvery, sc.every, csvPath)
	start := time.Now()
	nextKill := start.Add(sc.killEvery)
	tick := time.NewTicker(sc.every)
	defer tick.Stop()
	lastLog := start
	for time.Since(start) < sc.duration {
		for _, s := range series {
			smp, err := h.sampleProcess(ctx, urls[s.name], s.member, procs[s.name].Pid())
			if err != nil {
				continue // a member being restarted
			}
			smp.at, smp.run = time.Since(start), procs[s.name].Runs()
			s.samples = append(s.samples, smp)
			fmt.Fprintf(csv, "%.0f,%s,%d,%t,%d,%.0f,%.0f,%.0f,%.0f,%.0f\n", smp.at.Seconds(), s.name, smp.run, smp.leader, smp.streams, smp.rss, smp.anon, smp.goroutines, smp.fds, smp.raftBytes)
		}
		if time.Since(lastLog) >= time.Minute {
			h.log.logf("soak %v: %s", time.Since(start).Round(time.Second), soakLine(series))
			lastLog = time.Now()
		}
		if time.Now().After(nextKill) {
			end := h.fault("leader-kill")
			err := h.cl.KillLeader(ctx, h.cfg.killDown)
			end()
			if err != nil {
				return fmt.Errorf("soak: %w", err)
			}
			nextKill = time.Now().Add(sc.killEvery)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	var b strings.Builder
	h.soakOK = judgeSoak(&b, series)
	h.log.printf("%s", b.String())
	return nil
}

// soakLine is the latest sample of each process, in one line.
func soakLine(series []*soakSeries) string {
	var parts []string
	for _, s := range series {
		if n := len(s.samples); n > 0 {
			l := s.samples[n-1]
			p := fmt.Sprintf("%s %.0f MiB %0.f gor %.0f fds", s.name, l.rss/(1<<20), l.goroutines, l.fds)
			if s.member != nil {
				p += fmt.Sprintf(" %.1f MiB raft", l.raftBytes/(1<<20))
			}
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, "; ")
}

// sampleProcess reads a process's /metrics, and a member's Raft files.
func (h *harness) sampleProcess(ctx context.Context, url string, member *fleet.Coordinator, pid int) (soakSample, error) {
	var s soakSample
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return s, err
	}
	resp, err := h.cl.HTTP.Do(req)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	in := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	in.Buffer(nil, 1<<20)
	for in.Scan() {
		name, labels, v, ok := parseSample(in.Text())
		switch {
		case !ok:
		case name == "process_resident_memory_bytes":
			s.rss = v
		case name == "go_goroutines":
			s.goroutines = v
		case name == "process_open_fds":
			s.fds = v
		case name == "allot_coordinator_raft_state" && labels["state"] == "Leader":
			s.leader = v == 1
		case name == "allot_coordinator_rlqs_streams":
			s.streams = int(v)
		}
	}
	if member != nil {
		s.raftBytes = dirBytes(member.DataDir)
	}
	s.anon = rssAnon(pid)
	return s, in.Err()
}

// rssAnon reads a process's RssAnon from /proc, in bytes; 0 when it
// cannot.
func rssAnon(pid int) float64 {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			var kb float64
			fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(v), " kB"), &kb)
			return kb * 1024
		}
	}
	return 0
}

// dirBytes is the size of raft.db and snapshots/ in a data dir.
func dirBytes(dir string) float64 {
	var n int64
	if st, err := os.Stat(filepath.Join(dir, "raft.db")); err == nil {
		n += st.Size()
	}
	filepath.WalkDir(filepath.Join(dir, "snapshots"), func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return float64(n)
}

// levels reports whether a series levels off: the median of its last
// quarter is within limit (a factor) of the median of its second quarter,
// or no more than slack above it. It returns that ratio too. Fewer than
// eight samples cannot tell, and pass.
func levels(vals []float64, limit, slack float64) (ratio float64, ok bool) {
	if len(vals) < 8 {
		return 1, true
	}
	q := len(vals) / 4
	second, last := median(vals[q:2*q]), median(vals[len(vals)-q:])
	if second <= 0 {
		return 1, last <= slack
	}
	return last / second, last <= second*limit || last-second <= slack
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// minJudged is how long a run of a process must last to be judged: its
// first quarter, the warm-up, is not compared, and the ledger reaches its
// steady state within about a minute (ten-second windows, final 20 s and
// deleted 30 s after they end).
const minJudged = 100 * time.Second

// minJudgedMemory is how long a run must last for its memory and the Raft
// files to be judged: bbolt grows raft.db by doubling until the log is
// compacted at every snapshot, and the heap follows the mapped file, so a
// few minutes see steps, not a trend.
const minJudgedMemory = 10 * time.Minute

// judgeSoak writes a table of each series' growth and whether it levels
// off, and reports whether all do. Memory, goroutines and open files are
// judged per run of a process (a restart starts afresh) and, for
// coordinators, per role within it; the Raft files across runs (they stay
// on disk).
func judgeSoak(w io.Writer, series []*soakSeries) bool {
	ok := true
	fmt.Fprintf(w, "SOAK %-5s %-4s %8s %10s %12s %8s %10s %8s %12s\n", "proc", "run", "samples", "RSS MiB", "anon MiB", "×", "goroutines", "×", "fds ×")
	for _, s := range series {
		// A leader holds more than a follower (the division of every key,
		// a replication stream to each follower, Envoys' streams that
		// moved to it): memory and goroutines are compared within one run
		// in one role, like with like.
		type segment struct {
			run     int
			leader  bool
			streams int
		}
		bySeg := map[segment][]soakSample{}
		var segs []segment
		for _, smp := range s.samples {
			k := segment{smp.run, smp.leader, smp.streams}
			if _, seen := bySeg[k]; !seen {
				segs = append(segs, k)
			}
			bySeg[k] = append(bySeg[k], smp)
		}
		for _, sg := range segs {
			smps, r := bySeg[sg], sg.run
			role := ""
			if s.member != nil {
				role = map[bool]string{true: " leading", false: " following"}[sg.leader] + fmt.Sprintf(", %d Envoy streams", sg.streams)
			}
			if lasted := smps[len(smps)-1].at - smps[0].at; lasted < minJudged {
				fmt.Fprintf(w, "SOAK %-5s %-4d %8d%s for %v, too short to judge (a run is judged from %v)\n", s.name, r, len(smps), role, lasted.Round(time.Second), minJudged)
				continue
			}
			pick := func(f func(soakSample) float64) []float64 {
				out := make([]float64, len(smps))
				for i, x := range smps {
					out[i] = f(x)
				}
				return out
			}
			lasted := smps[len(smps)-1].at - smps[0].at
			rssR, rssOK := levels(pick(func(x soakSample) float64 { return x.anon }), 1.25, 16<<20)
			gorR, gorOK := levels(pick(func(x soakSample) float64 { return x.goroutines }), 1.25, 20)
			fdR, fdOK := levels(pick(func(x soakSample) float64 { return x.fds }), 1.25, 10)
			verdict := "levels off"
			if lasted < minJudgedMemory {
				rssOK, verdict = true, "levels off (memory not judged under "+minJudgedMemory.String()+")"
			}
			if !rssOK || !gorOK || !fdOK {
				verdict, ok = "GROWS", false
			}
			last := smps[len(smps)-1]
			fmt.Fprintf(w, "SOAK %-5s %-4d %8d %10.1f %12.1f %8.2f %10.0f %8.2f %12.2f %s%s\n", s.name, r, len(smps), last.rss/(1<<20), last.anon/(1<<20), rssR, last.goroutines, gorR, fdR, verdict, role)
		}
		if s.member != nil {
			all := make([]float64, len(s.samples))
			for i, x := range s.samples {
				all[i] = x.raftBytes
			}
			r, rOK := levels(all, 1.5, 8<<20)
			verdict := "levels off"
			if n := len(s.samples); n > 0 && s.samples[n-1].at < minJudgedMemory {
				rOK, verdict = true, "not judged under "+minJudgedMemory.String()
			}
			if !rOK {
				verdict, ok = "GROWS", false
			}
			last := 0.0
			if n := len(all); n > 0 {
				last = all[n-1]
			}
			fmt.Fprintf(w, "SOAK %-5s raft data dir %.1f MiB, ×%.2f over the run: %s\n", s.name, last/(1<<20), r, verdict)
		}
	}
	result := "PASS"
	if !ok {
		result = "FAIL"
	}
	fmt.Fprintf(w, "SOAK RESULT: %s (a series levels off when its last quarter's median is within 1.25× its second quarter's, 1.5× for the Raft files; memory is the anonymous resident memory, without raft.db's mapped pages; a coordinator is judged per run, role and number of Envoy streams; goroutines and open files for spans of %v or more, memory and the Raft files from %v)\n", result, minJudged, minJudgedMemory)
	return ok
}
