package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// churnCounts are the override changes made while the faults ran.
type churnCounts struct{ puts, deletes, failed int }

// churnOverrides changes the steady tenants' overrides of the
// tenant-window quota every half second with the allot CLI, as an
// operator would, until ctx ends: the limits the sidecars enforce move
// while leaders die, and the ledger must still bill exactly what was
// admitted. A call that finds no leader (mid-kill) fails and is counted.
func (h *harness) churnOverrides(ctx context.Context) churnCounts {
	var n churnCounts
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	set := map[string]bool{}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return n
		case <-tick.C:
		}
		tenant := fmt.Sprintf("steady-%02d", 1+rng.IntN(max(h.cfg.steadyTenants-1, 1)))
		args := []string{"overrides", "put", "tenant-window", tenant, "--limit", strconv.Itoa(20 + rng.IntN(400))}
		if set[tenant] && rng.IntN(3) == 0 {
			args = []string{"overrides", "delete", "tenant-window", tenant}
		}
		if err := h.allotCLI(ctx, args...); err != nil {
			n.failed++
			continue
		}
		if args[1] == "put" {
			n.puts++
			set[tenant] = true
		} else {
			n.deletes++
			delete(set, tenant)
		}
	}
}

// allotCLI runs the allot CLI against the cluster with the admin's
// credentials.
func (h *harness) allotCLI(ctx context.Context, args ...string) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	args = append(args, "--coordinator", strings.Join(h.cl.GRPCAddrs(), ","), "--timeout", "3s")
	if h.cl.Creds != nil {
		args = append(args, h.cl.Creds.ClientArgs()...)
	}
	out, err := exec.CommandContext(cctx, h.bin, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("allot %s: %w: %s", strings.Join(args[:3], " "), err, clip(string(out), 200))
	}
	return nil
}
