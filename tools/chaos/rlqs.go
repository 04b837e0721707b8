package main

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/allot-io/allot/coordinator/rlqs/rlqstest"
	"github.com/allot-io/allot/internal/auth"
	"github.com/allot-io/allot/internal/fleet"
)

// The Envoys share one tenant, which the load never sends, under a rule
// only they use: the ledger's lines for it are theirs alone.
const (
	envoyTenant = "envoy-shared"
	envoyRule   = "envoy-quota"
	envoyLimit  = 150 // per second, divided among the Envoys
)

// envoyLoad is Envoys speaking RLQS straight to the coordinators through
// every fault, each offering as much as the whole limit.
type envoyLoad struct {
	list   []*rlqstest.Envoy
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startEnvoys starts the run's Envoys, each on its own coordinator first
// and the next on every break, with an agent's credential when the
// cluster is secured.
func (h *harness) startEnvoys(ctx context.Context) (*envoyLoad, error) {
	dial := grpc.WithTransportCredentials(insecure.NewCredentials())
	var opts []grpc.DialOption
	if cr := h.cl.Creds; cr != nil {
		r, err := auth.NewReloader(auth.TLSFiles{CAFile: cr.CA}, nil)
		if err != nil {
			return nil, err
		}
		dial = grpc.WithTransportCredentials(r.ClientCredentials())
		token := fleet.Token(cr.Agents[h.cl.Sidecars[0].ID])
		opts = append(opts, grpc.WithPerRPCCredentials(auth.StaticTokenCredentials(token)))
	}
	ctx, cancel := context.WithCancel(ctx)
	el := &envoyLoad{cancel: cancel}
	n := len(h.cl.Coords)
	for i := range h.cfg.envoys {
		var addrs []string
		for j := range n {
			addrs = append(addrs, h.cl.Coords[(i+j)%n].GRPC)
		}
		e := rlqstest.New(addrs, map[string]string{"rule": envoyRule, "tenant": envoyTenant}, envoyLimit, append(opts, dial)...)
		e.Interval = h.cfg.reportInterval
		el.list = append(el.list, e)
		el.wg.Go(func() { _ = e.Run(ctx) })
	}
	h.log.logf("envoys: %d RLQS streams sharing %d/s of %s", len(el.list), envoyLimit, envoyRule)
	return el, nil
}

// stop closes every stream cleanly and waits for the coordinators to end
// them, so that everything reported is recorded or lost for good.
func (el *envoyLoad) stop() {
	el.cancel()
	el.wg.Wait()
}

// envoyVerdict takes the Envoys' lines out of the ledger and checks them:
// nothing counted twice (the ledger holds no more than they reported
// allowed), and nothing lost beyond what RLQS cannot promise (the last
// reports of streams whose coordinator was killed).
func (h *harness) envoyVerdict(el *envoyLoad, led ledgerSums, rules *ruleSet) bool {
	var ledgered uint64
	for k, u := range led {
		if k.tenant == envoyTenant {
			if k.rule == rules.index[envoyRule] {
				ledgered += u.adm.big().Uint64()
			}
			delete(led, k)
		}
	}
	var reported, atRisk uint64
	streams := 0
	for _, e := range el.list {
		reported, atRisk, streams = reported+e.Reported(), atRisk+e.AtRisk(), streams+e.Streams()
	}
	ok := ledgered <= reported && reported-ledgered <= atRisk+h.rlqsAllowed+h.rlqsUnreceived
	verdict := "PASS"
	if !ok {
		verdict = "FAIL"
	}
	quorum := ""
	if h.rlqsAllowed > 0 || h.rlqsUnreceived > 0 {
		quorum = fmt.Sprintf(", or reported while no member could commit, %d, or committed in entries the recovered member never received, %d", h.rlqsAllowed, h.rlqsUnreceived)
	}
	h.log.logf("SUMMARY envoys (RLQS): %d streams; reported allowed %d, in the ledger %d: %d lost (at most %d were in flight when their coordinator died%s), %d double-counted: %s",
		streams, reported, ledgered, reported-min(reported, ledgered), atRisk, quorum, ledgered-min(reported, ledgered), verdict)
	return ok
}

// reported is what the Envoys have reported allowed so far.
func (el *envoyLoad) reported() uint64 {
	if el == nil {
		return 0
	}
	var n uint64
	for _, e := range el.list {
		n += e.Reported()
	}
	return n
}
