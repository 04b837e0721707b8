package retry

import (
	"io"
	"net/http"
)

// Idempotent reports whether req is idempotent as RFC 9110 section 9.2.2
// defines it (GET, HEAD, OPTIONS, TRACE, PUT and DELETE), or carries an
// Idempotency-Key or X-Idempotency-Key header, the rule net/http itself
// uses. Set Options.Replayable to Idempotent to retry only such requests.
func Idempotent(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	_, key := req.Header["Idempotency-Key"]
	_, xkey := req.Header["X-Idempotency-Key"]
	return key || xkey
}

// bodyReplayable reports whether req's body can be sent again: it has none,
// or GetBody can produce a fresh copy.
func bodyReplayable(req *http.Request) bool {
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// replay returns a copy of req for another attempt, with a fresh body.
func replay(req *http.Request) (*http.Request, error) {
	r := req.Clone(req.Context())
	if req.Body == nil || req.Body == http.NoBody {
		return r, nil
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, err
	}
	r.Body = body
	return r, nil
}

// drainLimit bounds how much of a discarded response is read. Reading a
// small body to the end lets the connection be reused; reading a large one
// would cost more than a new connection.
const drainLimit = 64 << 10

// discard drains and closes the body of a response that will not be
// returned.
func discard(resp *http.Response) {
	if resp == nil || resp.Body == nil {
		return
	}
	_, _ = io.CopyN(io.Discard, resp.Body, drainLimit)
	_ = resp.Body.Close()
}
