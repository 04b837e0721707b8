package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/allot-io/allot/internal/auth"
	"github.com/allot-io/allot/internal/fleet"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// forgedNewNodes is the bound on new node IDs a minute the secured
// cluster runs with; the forged phase invents twice as many.
const forgedNewNodes = 30

// forgedCase is one report an attacker sends straight to the leader,
// with a credential and the code it must get. Every one carries usage of
// a tenant the load never sends, so that any unit it wrote would show in
// the ledger comparison as counted twice.
type forgedCase struct {
	name  string
	token string // a token file, or a literal token after "literal:"
	node  string
	mod   func(*allotpb.ReportRequest)
	want  codes.Code
}

// forge sends forged reports to the leader and checks each is refused as
// it must be; then it floods the leader with invented node IDs and checks
// the new-node bound held. Refused reports write nothing: the ledger
// comparison proves it.
func (h *harness) forge(ctx context.Context) error {
	cr := h.cl.Creds
	leader, _ := h.cl.FindLeader(ctx)
	if leader == nil {
		return fmt.Errorf("forged reports: no leader")
	}
	r, err := auth.NewReloader(auth.TLSFiles{CAFile: cr.CA}, nil)
	if err != nil {
		return err
	}
	cc, err := grpc.NewClient(leader.GRPC, grpc.WithTransportCredentials(r.ClientCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	client := allotpb.NewAgentServiceClient(cc)
	seq := uint64(0)
	send := func(token, node, tenant string, mod func(*allotpb.ReportRequest)) error {
		seq++
		now := time.Now()
		req := &allotpb.ReportRequest{Protocol: allotpb.ProtocolVersion_PROTOCOL_VERSION_1, Node: node, Incarnation: 0xf0f0 + seq,
			SentUnixNano: now.UnixNano(), IntervalNano: int64(h.cfg.reportInterval),
			Usage: &allotpb.UsageBatch{Seq: 1, CutUnixNano: now.UnixNano(), Counts: []*allotpb.UsageCount{
				{Rule: "tenant-window", Tenant: tenant, WindowUnix: now.Truncate(h.cfg.billingWindow).Unix(), Admitted: 1000},
			}}}
		if mod != nil {
			mod(req)
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if lit, ok := strings.CutPrefix(token, "literal:"); ok {
			cctx = metadata.AppendToOutgoingContext(cctx, "authorization", "Bearer "+lit)
		} else if token != "" {
			cctx = metadata.AppendToOutgoingContext(cctx, "authorization", "Bearer "+fleet.Token(token))
		}
		_, err := client.Report(cctx, req)
		return err
	}
	gw1, gw2 := cr.Agents[h.cl.Sidecars[0].ID], cr.Agents[h.cl.Sidecars[1].ID]
	node1 := h.cl.Sidecars[0].ID
	for _, fc := range []forgedCase{
		{"no credential", "", node1, nil, codes.Unauthenticated},
		{"a wrong token", "literal:" + auth.NewToken(), node1, nil, codes.Unauthenticated},
		{"a reader's token", cr.Reader, node1, nil, codes.PermissionDenied},
		{"another sidecar's token", gw2, node1, nil, codes.PermissionDenied},
		{"a sidecar's token as an invented node", gw1, "gw-invented", nil, codes.PermissionDenied},
		{"priority 300", gw1, node1, func(r *allotpb.ReportRequest) {
			r.Demand = []*allotpb.KeyDemand{{Rule: "tenant-window", Key: "forged", Tenant: "forged", Priority: 300}}
		}, codes.InvalidArgument},
		{"a clock two hours behind", gw1, node1, func(r *allotpb.ReportRequest) { r.SentUnixNano -= int64(2 * time.Hour) }, codes.InvalidArgument},
		{"a cut a day ahead", gw1, node1, func(r *allotpb.ReportRequest) { r.Usage.CutUnixNano += int64(24 * time.Hour) }, codes.InvalidArgument},
	} {
		err := send(fc.token, fc.node, "forged-"+strings.ReplaceAll(fc.name, " ", "-"), fc.mod)
		h.log.logf("forged report with %s as %s: %v", fc.name, fc.node, status.Code(err))
		if status.Code(err) != fc.want {
			return fmt.Errorf("forged report with %s: got %v (%v), want %v", fc.name, status.Code(err), err, fc.want)
		}
	}
	// Invented nodes, with the admin's token, which may report as anyone:
	// demand only, no usage. At most the bound joins.
	refused, accepted := 0, 0
	for i := range 2 * forgedNewNodes {
		err := send(cr.Admin, fmt.Sprintf("invented-%d", i), "", func(r *allotpb.ReportRequest) {
			r.Usage = nil
			r.Demand = []*allotpb.KeyDemand{{Rule: "tenant-window", Key: "forged-flood", Tenant: "forged-flood", Admitted: 1}}
		})
		switch status.Code(err) {
		case codes.OK:
			accepted++
		case codes.ResourceExhausted:
			refused++
		default:
			return fmt.Errorf("invented node %d: %v", i, err)
		}
	}
	h.log.logf("forged reports: %d invented nodes admitted, %d refused (bound %d a minute)", accepted, refused, forgedNewNodes)
	if accepted > forgedNewNodes+1 {
		return fmt.Errorf("invented nodes: %d admitted, beyond the bound of %d a minute", accepted, forgedNewNodes)
	}
	return nil
}
