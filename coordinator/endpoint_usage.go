package coordinator

import (
	"context"
	"encoding/base64"
	"fmt"
	"math"
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
