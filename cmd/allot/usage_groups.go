package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/allot-io/allot/coordinator/billing"
	"github.com/allot-io/allot/internal/shard"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fetchRegionLedger reads one region's ledger: from its one cluster, or,
// when the region is split into shard groups, from every group its home
// group's map lists, summed (billing.SumGroups). A group that cannot be
// read fails the whole export: a bill missing a group would be short.
func fetchRegionLedger(ctx context.Context, cf *clientFlags, q *allotpb.UsageQuery, source int) ([]billing.LedgerLine, error) {
	m, err := regionMap(ctx, cf)
	if err != nil {
		return nil, err
	}
	if m == nil || len(m.Groups) < 2 {
		return fetchLedger(ctx, cf, q, source)
	}
	var groups [][]billing.LedgerLine
	for _, g := range m.GroupIDs() {
		gf := *cf
		gf.coordinators = strings.Join(m.Groups[g], ",")
		got, err := fetchLedger(ctx, &gf, q, source)
		if err != nil {
			return nil, fmt.Errorf("shard group %s (%s): %w", g, gf.coordinators, err)
		}
		groups = append(groups, got)
	}
	return billing.SumGroups(groups), nil
}

// regionMap is the shard map of the region cf names, or nil when it was
// never split (or its coordinators predate shard groups).
func regionMap(ctx context.Context, cf *clientFlags) (*shard.Map, error) {
	cl, err := cf.dial()
	if err != nil {
		return nil, &usageError{err: err, hint: "usage"}
	}
	defer cl.Close()
	var pm *allotpb.ShardMap
	var refusal error // the cluster's answer, kept with its code
	err = cf.once(ctx, cl, func(ctx context.Context, cc *grpc.ClientConn) error {
		var err error
		pm, err = allotpb.NewShardServiceClient(cc).GetShardMap(ctx, &allotpb.GetShardMapRequest{})
		if c := status.Code(err); c == codes.Unimplemented || c == codes.FailedPrecondition {
			refusal, err = err, nil
		}
		return err
	})
	switch {
	case err != nil:
		return nil, fmt.Errorf("reading the shard map: %w", err)
	case status.Code(refusal) == codes.Unimplemented:
		return nil, nil // a coordinator older than shard groups
	case refusal != nil:
		return nil, fmt.Errorf("%s (give --coordinator the home group's members: its map lists the other groups)", status.Convert(refusal).Message())
	}
	if pm.GetVersion() == 0 {
		return nil, nil
	}
	return shard.FromProto(pm)
}
