package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/allot-io/allot/internal/fleet"
)

// stream is one tenant's traffic: Rate checks per second, open loop, from
// Start to Stop after the load begins, spread evenly over the sidecars
// that are up, each check counted under Key (the tenant, or the rule for a
// global rule) in bins of Bin.
type stream struct {
	Tenant, Plan, Key string
	Rate              float64
	Start, Stop       time.Duration
	Bin               time.Duration
	// Window: Bin is the rule's fixed window, and an answer's window is
	// the one its reset_after_seconds ends.
	Window bool
}

// bin is what one key was offered and admitted in one bin of time.
type bin struct{ offered, admitted, denied, failed int64 }

// binKey is a key's bin: its index counts Bin-long spans of Unix time,
// so a fixed window's bins are its windows (algo: epoch-aligned).
type binKey struct {
	key string
	idx int64
}

// counts is what the load generator saw.
type counts struct {
	mu      sync.Mutex
	bins    map[binKey]*bin
	dropped atomic.Int64 // checks not sent: every worker was busy
	sent    atomic.Int64
}

func (c *counts) at(k binKey) *bin {
	b := c.bins[k]
	if b == nil {
		b = &bin{}
		c.bins[k] = b
	}
	return b
}

// job is one check to send.
type job struct {
	s       *stream
	sidecar int
}

// generator sends streams at their offered rates, whatever the answers
// (open loop): a dispatcher turns due checks into jobs, a bounded pool of
// workers sends them. A check is counted offered in the bin it was sent
// in and admitted (200) or denied (429) in the bin of its answer's
// midpoint between sending and answer: on loopback the sidecar decided
// within that round trip, and the coordinators' window boundaries are on
// this same machine's clock.
type generator struct {
	sidecars []*fleet.Sidecar
	up       []atomic.Bool // sidecars the generator may send to
	http     *http.Client
	workers  int
	counts   *counts
	// random spreads checks uniformly at random over the sidecars that
	// are up (a least-request or random load balancer), instead of in
	// turn; rnd is its source, used by run's goroutine only.
	random bool
	rnd    *rand.Rand
}

func newGenerator(sidecars []*fleet.Sidecar, workers int) *generator {
	tr := &http.Transport{MaxIdleConns: 2 * workers, MaxIdleConnsPerHost: workers, IdleConnTimeout: time.Minute, DisableCompression: true}
	g := &generator{sidecars: sidecars, up: make([]atomic.Bool, len(sidecars)), workers: workers,
		http: &http.Client{Transport: tr, Timeout: 5 * time.Second}, counts: &counts{bins: map[binKey]*bin{}}}
	for i := range g.up {
		g.up[i].Store(true)
	}
	return g
}

// run sends the streams from begin until every stream has stopped, stop
// is closed, ctx is done, or limit checks have been sent, and waits for
// the answers in flight.
func (g *generator) run(ctx context.Context, begin time.Time, streams []*stream, limit int64, stop <-chan struct{}) {
	jobs := make(chan job, 4*g.workers)
	var wg sync.WaitGroup
	for range g.workers {
		wg.Go(func() {
			for j := range jobs {
				g.send(ctx, j)
			}
		})
	}
	defer func() {
		close(jobs)
		wg.Wait()
		g.http.CloseIdleConnections()
	}()
	sent := make([]int64, len(streams))
	next := make([]int, len(streams)) // round-robin position per stream
	var end time.Duration
	for _, s := range streams {
		end = max(end, s.Stop)
	}
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	if err := fleet.Sleep(ctx, time.Until(begin)); err != nil {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case <-tick.C:
		}
		now := time.Since(begin)
		if now >= end {
			return
		}
		for i, s := range streams {
			if now < s.Start || now >= s.Stop {
				continue
			}
			due := int64((now-s.Start).Seconds()*s.Rate) + 1 - sent[i]
			for ; due > 0; due-- {
				if g.counts.sent.Load() >= limit {
					return
				}
				sent[i]++
				node := g.pick(&next[i])
				if node < 0 {
					g.counts.dropped.Add(1)
					continue
				}
				select {
				case jobs <- job{s: s, sidecar: node}:
					g.counts.sent.Add(1)
				default:
					g.counts.dropped.Add(1)
				}
			}
		}
	}
}

// pick is the next sidecar that is up after *pos (or, spreading at
// random, one at random), or -1.
func (g *generator) pick(pos *int) int {
	if g.random {
		*pos = g.rnd.IntN(len(g.sidecars))
	}
	for range len(g.sidecars) {
		n := *pos % len(g.sidecars)
		*pos++
		if g.up[n].Load() {
			return n
		}
	}
	return -1
}

// send sends one check and counts its answer.
func (g *generator) send(ctx context.Context, j job) {
	body, err := json.Marshal(map[string]string{"tenant": j.s.Tenant, "plan": j.s.Plan, "user": "u1", "route": "/v1/items"})
	if err != nil {
		return
	}
	sentAt := time.Now()
	status, reset := g.post(ctx, g.sidecars[j.sidecar].URL("/v1/check"), body)
	answered := time.Now()
	width := j.s.Bin.Nanoseconds()
	idx := sentAt.Add(answered.Sub(sentAt)/2).UnixNano() / width
	if j.s.Window && reset > 0 && reset <= j.s.Bin.Seconds() {
		// The sidecar's own timing: its window ends reset_after_seconds
		// after its decision, a round trip at most before the answer.
		end := answered.Add(time.Duration(reset * float64(time.Second))).UnixNano()
		idx = (end+width/2)/width - 1
	}
	g.counts.mu.Lock()
	defer g.counts.mu.Unlock()
	g.counts.at(binKey{j.s.Key, sentAt.UnixNano() / width}).offered++
	b := g.counts.at(binKey{j.s.Key, idx})
	switch status {
	case http.StatusOK:
		b.admitted++
	case http.StatusTooManyRequests:
		b.denied++
	default:
		b.failed++
	}
}

// post returns the answer's status, or 0 when there was none, and its
// reset_after_seconds.
func (g *generator) post(ctx context.Context, url string, body []byte) (int, float64) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, 0
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := g.http.Do(req)
	if err != nil {
		return 0, 0
	}
	defer resp.Body.Close()
	var ans struct {
		Reset float64 `json:"reset_after_seconds"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&ans); err != nil {
		ans.Reset = 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, ans.Reset
}

// totals sums the bins: checks offered, admitted, denied and failed.
func (c *counts) totals() (off, adm, den, fail int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range c.bins {
		off += b.offered
		adm += b.admitted
		den += b.denied
		fail += b.failed
	}
	return
}

func (c *counts) String() string {
	off, adm, den, fail := c.totals()
	return fmt.Sprintf("sent %d (not sent: %d, workers busy), admitted %d, denied %d, failed %d", off, c.dropped.Load(), adm, den, fail)
}

// appendBins adds one scenario's bins to a CSV file, writing its header
// when the file is new: what -bins keeps for a look at each second.
func appendBins(path string, nodes int, scenario string, c *counts) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("-bins: %w", err)
	}
	defer f.Close()
	w := csv.NewWriter(f)
	if st, err := f.Stat(); err == nil && st.Size() == 0 {
		_ = w.Write([]string{"sidecars", "scenario", "key", "bin", "offered", "admitted", "denied", "failed"})
	}
	c.mu.Lock()
	keys := make([]binKey, 0, len(c.bins))
	for k := range c.bins {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b binKey) int {
		return cmp.Or(strings.Compare(a.key, b.key), cmp.Compare(a.idx, b.idx))
	})
	for _, k := range keys {
		b := c.bins[k]
		_ = w.Write([]string{strconv.Itoa(nodes), scenario, k.key, strconv.FormatInt(k.idx, 10),
			strconv.FormatInt(b.offered, 10), strconv.FormatInt(b.admitted, 10), strconv.FormatInt(b.denied, 10), strconv.FormatInt(b.failed, 10)})
	}
	c.mu.Unlock()
	w.Flush()
	if err := w.Error(); err != nil {
		return fmt.Errorf("-bins: writing %s: %w", path, err)
	}
	return f.Close()
}
