package coordinator

import (
	"context"
	"encoding/base64"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/allot-io/allot/coordinator/ledgersink"
	"github.com/allot-io/allot/ledger"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/proto/ledgerpb"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// usageServer answers the usage ledger's queries: billing jobs page
// through it, from the members' memory or, once exported, from the sink.
type usageServer struct {
	allotpb.UnimplementedUsageServiceServer
	c *Coordinator
}

// QueryUsage reads the replicated ledger; any member answers.
func (s *usageServer) QueryUsage(ctx context.Context, q *allotpb.UsageQuery) (*allotpb.UsageResponse, error) {
	return s.c.regionUsage(ctx, q)
}

// queryUsage answers a page of the bill: from the state for the lines it
// holds and, with a sink, from the sink for the lines exported.
func (c *Coordinator) queryUsage(ctx context.Context, q *allotpb.UsageQuery) (*allotpb.UsageResponse, error) {
	from, to := int64(math.MinInt64), int64(math.MaxInt64)
	if q.GetFrom() != nil {
		if err := q.GetFrom().CheckValid(); err != nil {
			return nil, invalid("from", err.Error())
		}
		from = ceilSeconds(q.GetFrom())
	}
	if q.GetTo() != nil {
		if err := q.GetTo().CheckValid(); err != nil {
			return nil, invalid("to", err.Error())
		}
		to = ceilSeconds(q.GetTo())
	}
	size := int(q.GetPageSize())
	if size == 0 {
		size = 1000
	}
	if size > 10000 {
		return nil, invalid("page_size", "must be at most 10000")
	}
	var after *ledger.Key
	if tok := q.GetPageToken(); tok != "" {
		k, err := decodePageToken(tok)
		if err != nil {
			return nil, invalid("page_token", err.Error())
		}
		after = &k
	}
	lq := state.LedgerQuery{From: from, To: to, Tenant: q.GetTenant(), Rule: q.GetRule(), Region: q.GetRegion()}
	var (
		page    usagePage
		cluster string
		pos     ledger.Position
		width   int64
	)
	c.fsm.Read(func(st *state.State) {
		lines, next, more := st.LedgerPage(lq, after, size, state.MaxScanPerPage)
		page = usagePage{lines: lines, next: next, more: more}
		cluster, pos, width = st.ClusterID(), st.Exported(), st.BillingWindowSeconds()
	})
	if c.sink != nil && pos.Set && (after == nil || ledger.CompareKeys(*after, pos.Last) < 0) && from <= pos.Last.Window {
		// The sink holds every line up to the position the state was read
		// at, and the state none of them: its lines come first.
		exported, err := c.exportedUsage(ctx, cluster, lq, after, pos, size, width)
		if err != nil {
			return nil, err
		}
		page = exported.then(page, size)
	}
	return page.response(), nil
}

// usagePage is one page of ledger lines, from the state or the sink.
type usagePage struct {
	lines []ledger.Line
	next  ledger.Key
	more  bool
	// exported is how many of the lines, first, come from the sink.
	exported int
}

// then is p followed by the state's page st, cut at size lines.
func (p usagePage) then(st usagePage, size int) usagePage {
	p.exported = len(p.lines)
	if len(p.lines) == size {
		p.more, p.next = true, p.lines[len(p.lines)-1].Key
		return p
	}
	room := size - len(p.lines)
	if len(st.lines) > room {
		p.lines = append(p.lines, st.lines[:room]...)
		p.more, p.next = true, p.lines[len(p.lines)-1].Key
		return p
	}
	p.lines = append(p.lines, st.lines...)
	p.more, p.next = st.more, st.next
	return p
}

func (p usagePage) response() *allotpb.UsageResponse {
	resp := &allotpb.UsageResponse{}
	for i, l := range p.lines {
		resp.Records = append(resp.Records, ledgerpb.ToProto(l, i < p.exported))
	}
	if p.more {
		resp.NextPageToken = encodePageToken(p.next)
	}
	return resp
}

// exportedUsage reads the lines matching lq after `after` that the sink
// holds, up to the position pos: lines past it the sink committed since
// are still in the state as it was read, and come from there. width is
// the state's billing window, for the refusal when the sink cannot be
// read.
func (c *Coordinator) exportedUsage(ctx context.Context, cluster string, lq state.LedgerQuery, after *ledger.Key, pos ledger.Position, size int, width int64) (usagePage, error) {
	// No window starts before 1901: From within what a timestamp holds.
	q := ledgersink.Query{From: max(lq.From, math.MinInt32), To: min(lq.To, pos.Last.Window+1), Tenant: lq.Tenant, Rule: lq.Rule, Region: lq.Region, Limit: size}
	q.After = after
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ExportTimeout)
	defer cancel()
	lines, _, err := c.sink.Query(ctx, cluster, q)
	if err != nil {
		return usagePage{}, sinkUnavailable(err, pos.Last.Window, width)
	}
	out := usagePage{}
	for _, l := range lines {
		if ledger.CompareKeys(l.Key, pos.Last) > 0 {
			break
		}
		out.lines = append(out.lines, l)
	}
	return out, nil
}

// sinkUnavailable is the refusal of a page that needs the windows up to
// the one starting at last, exported to a sink that could not be read:
// UNAVAILABLE, as the database is, with an ErrorInfo
// (allotpb.ReasonLedgerSinkUnavailable) that tells a client the
// coordinator did answer, and the windows it can still answer from
// memory, from the next one on.
func sinkUnavailable(err error, last, width int64) error {
	cause := ledgersink.Cause(err)
	through := time.Unix(last, 0).UTC().Format(time.RFC3339)
	next := time.Unix(last+width, 0).UTC().Format(time.RFC3339)
	st := status.New(codes.Unavailable, fmt.Sprintf("the ledger sink %s (%v): windows up to %s were exported to it; windows from %s on are still in memory: query from %s to read them without it",
		sinkState(cause), err, through, next, next))
	if d, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: allotpb.ReasonLedgerSinkUnavailable, Domain: allotpb.ErrorDomain,
		Metadata: map[string]string{"cause": cause, "error": err.Error(), "exported_through": through, "in_memory_from": next}}); derr == nil {
		st = d
	}
	return st.Err()
}

// sinkState says what is wrong with the sink, by ledgersink.Cause's label.
func sinkState(cause string) string {
	switch cause {
	case "unreachable":
		return "is unreachable"
	case "auth":
		return "refused the coordinator's role or password"
	case "timeout":
		return "did not answer in time"
	case "schema":
		return "lacks Allot's tables"
	}
	return "could not be read"
}

// ceilSeconds rounds a bound up to a whole second. Windows start on whole
// seconds, so from ≤ start < to holds exactly when it holds for the bounds
// rounded up; truncating instead would leave out the window starting in
// the second that "to" falls in, and let in one starting just before
// "from".
func ceilSeconds(ts *timestamppb.Timestamp) int64 {
	s := ts.GetSeconds()
	if ts.GetNanos() > 0 {
		s++
	}
	return s
}

func encodePageToken(k ledger.Key) string {
	raw := strings.Join([]string{strconv.FormatInt(k.Window, 10), k.Tenant, k.Rule, k.Region}, "\x00")
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

func decodePageToken(tok string) (ledger.Key, error) {
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return ledger.Key{}, fmt.Errorf("not a token this coordinator issued")
	}
	parts := strings.Split(string(raw), "\x00")
	if len(parts) != 4 {
		return ledger.Key{}, fmt.Errorf("not a token this coordinator issued")
	}
	w, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil {
		return ledger.Key{}, fmt.Errorf("not a token this coordinator issued")
	}
	return ledger.Key{Window: w, Tenant: parts[1], Rule: parts[2], Region: parts[3]}, nil
}

// ListNotices lists threshold notices from this member's replica: every
// member holds them all, as it holds the ledger. A page ends after
// page_size notices, or after state.MaxScanPerPage notices its filters
// leave out, with a token to continue from.
func (s *usageServer) ListNotices(_ context.Context, q *allotpb.ListNoticesRequest) (*allotpb.ListNoticesResponse, error) {
	return s.c.listNotices(q)
}

// listNotices answers ListNotices and GET /v1/notices.
func (c *Coordinator) listNotices(q *allotpb.ListNoticesRequest) (*allotpb.ListNoticesResponse, error) {
	size := int(q.GetPageSize())
	if size == 0 {
		size = 1000
	}
	if size < 0 || size > 10000 {
		return nil, invalid("page_size", "must be from 1 to 10000")
	}
	var after string
	if tok := q.GetPageToken(); tok != "" {
		b, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil || len(b) == 0 {
			return nil, invalid("page_token", "not a token a page of notices gave")
		}
		after = string(b)
	}
	resp := &allotpb.ListNoticesResponse{}
	c.fsm.Read(func(st *state.State) {
		scanned, last, more := 0, "", false
		st.NoticesAfter(after, func(n *allotpb.Notice) bool {
			if len(resp.Notices) == size || scanned == state.MaxScanPerPage {
				more = true
				return false
			}
			last = n.GetKey()
			if q.GetPendingOnly() && n.GetDeliveredUnixNano() != 0 ||
				q.GetTenant() != "" && n.GetTenant() != q.GetTenant() || q.GetRule() != "" && n.GetRule() != q.GetRule() {
				scanned++
				return true
			}
			resp.Notices = append(resp.Notices, n)
			return true
		})
		if more {
			resp.NextPageToken = base64.RawURLEncoding.EncodeToString([]byte(last))
		}
	})
	return resp, nil
}

// noticesQueryFromURL reads GET /v1/notices' query: ?pending=true
// &tenant= &rule= &page_size= &page_token=.
func noticesQueryFromURL(r *http.Request) (*allotpb.ListNoticesRequest, error) {
	v := r.URL.Query()
	q := &allotpb.ListNoticesRequest{Tenant: v.Get("tenant"), Rule: v.Get("rule"), PageToken: v.Get("page_token")}
	if s := v.Get("pending"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return nil, fmt.Errorf("pending: want true or false, not %q", s)
		}
		q.PendingOnly = b
	}
	if s := v.Get("page_size"); s != "" {
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("page_size: %w", err)
		}
		q.PageSize = int32(n)
	}
	return q, nil
}

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
