package coordinator

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"

	"github.com/allot-io/allot/coordinator/internal/state"
	allotpb "github.com/allot-io/allot/proto"
)

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
