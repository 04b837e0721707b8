package coordinator

import (
	"context"
	"fmt"
	"slices"

	"github.com/allot-io/allot/ledger"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/proto/ledgerpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// regionUsage answers a usage query for the region: this cluster's
// ledger when the region was never split, and on the home group of a
// split one, every group's, merged (docs/coordinator.md#one-bill-across-groups).
// A tenant whose slot moved within a window has a line in two groups; the
// region's line is their sum, as each counted different units. A group
// that is not home answers only with group_only, so that a bill is never
// read short from it.
func (c *Coordinator) regionUsage(ctx context.Context, q *allotpb.UsageQuery) (*allotpb.UsageResponse, error) {
	if q.GetGroupOnly() {
		return c.queryUsage(ctx, q)
	}
	if !c.isHome() {
		return nil, status.Errorf(codes.FailedPrecondition, "shard group %q holds part of the region's ledger: ask the home group (%v), which answers for every group, or ask for this group's part alone (group_only: allot usage --group-only, /v1/usage?group_only=true)", c.groupID(), c.cfg.ShardHome)
	}
	m := c.shardMap()
	if m.Version == 0 || len(m.Groups) < 2 {
		return c.queryUsage(ctx, q)
	}
	size := int(q.GetPageSize())
	if size == 0 {
		size = 1000
	}
	part := proto.Clone(q).(*allotpb.UsageQuery)
	part.GroupOnly = true
	var lines []*allotpb.UsageRecord
	var cutoff *ledger.Key // lines past the first full page's last are read again next page
	for _, g := range m.GroupIDs() {
		var resp *allotpb.UsageResponse
		var err error
		if g == c.groupID() {
			resp, err = c.queryUsage(ctx, part)
		} else {
			resp, err = c.groupUsage(ctx, m.Groups[g], part)
		}
		if err != nil {
			if st, ok := status.FromError(err); ok && st.Code() == codes.InvalidArgument {
				return nil, err
			}
			return nil, groupUnavailable(g, err)
		}
		recs := resp.GetRecords()
		lines = append(lines, recs...)
		if resp.GetNextPageToken() != "" && len(recs) > 0 {
			if k := recordKey(recs[len(recs)-1]); cutoff == nil || ledger.CompareKeys(k, *cutoff) < 0 {
				cutoff = &k
			}
		}
	}
	merged := sumRecords(lines, cutoff)
	out := &allotpb.UsageResponse{Records: merged}
	if len(merged) > size {
		out.Records = merged[:size]
	}
	if cutoff != nil || len(merged) > size {
		out.NextPageToken = encodePageToken(recordKey(out.Records[len(out.Records)-1]))
	}
	return out, nil
}

// groupUsage reads one page of another group's ledger, with this
// member's credentials.
func (c *Coordinator) groupUsage(ctx context.Context, addrs []string, q *allotpb.UsageQuery) (*allotpb.UsageResponse, error) {
	var lastErr error = fmt.Errorf("no member known")
	for _, a := range addrs {
		resp, err := allotpb.NewUsageServiceClient(c.peers.conn(a)).QueryUsage(withToken(ctx, c.joinToken()), q)
		if err == nil {
			return resp, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// groupUnavailable is the refusal of a bill whose group g's part could
// not be read: UNAVAILABLE, naming the group, and keeping the details of
// the group's own refusal (a sink that could not be read says which
// windows are still in memory).
func groupUnavailable(g string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return status.Errorf(codes.Unavailable, "shard group %s's part of the ledger could not be read: %v", g, err)
	}
	p := st.Proto()
	p.Code = int32(codes.Unavailable)
	p.Message = fmt.Sprintf("shard group %s's part of the ledger could not be read: %s", g, st.Message())
	return status.FromProto(p).Err()
}

// recordKey is a usage record's ledger key.
func recordKey(r *allotpb.UsageRecord) ledger.Key { return ledgerpb.FromProto(r).Key }

// sumRecords merges the groups' lines in ledger order, up to cutoff
// (nil: all), adding those of one key.
func sumRecords(lines []*allotpb.UsageRecord, cutoff *ledger.Key) []*allotpb.UsageRecord {
	slices.SortStableFunc(lines, func(a, b *allotpb.UsageRecord) int { return ledger.CompareKeys(recordKey(a), recordKey(b)) })
	var out []*allotpb.UsageRecord
	for _, l := range lines {
		k := recordKey(l)
		if cutoff != nil && ledger.CompareKeys(k, *cutoff) > 0 {
			break
		}
		if n := len(out); n > 0 && ledger.CompareKeys(recordKey(out[n-1]), k) == 0 {
			s := out[n-1]
			s.Admitted = allotpb.SaturatingAdd(s.Admitted, l.GetAdmitted())
			s.Denied = allotpb.SaturatingAdd(s.Denied, l.GetDenied())
			s.Final = s.Final && l.GetFinal()
			s.Exported = s.Exported && l.GetExported()
			if l.Granted != nil {
				g := l.GetGranted()
				if s.Granted != nil {
					g += s.GetGranted()
				}
				s.Granted = &g
			}
			continue
		}
		out = append(out, proto.Clone(l).(*allotpb.UsageRecord))
	}
	return out
}
