package coordinator

import (
	"context"
	"encoding/base64"

	"github.com/allot-io/allot/coordinator/internal/state"
	allotpb "github.com/allot-io/allot/proto"
)

// ListNotices lists threshold notices from this member's replica: every
// member holds them all, as it holds the ledger. A page ends after
// page_size notices, or after state.MaxScanPerPage notices its filters
// leave out, with a token to continue from.
func (s *usageServer) ListNotices(_ context.Context, q *allotpb.ListNoticesRequest) (*allotpb.ListNoticesResponse, error) {
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
	s.c.fsm.Read(func(st *state.State) {
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
