package coordinator

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/allot-io/allot/coordinator/internal/authz"
	"github.com/allot-io/allot/internal/auth"
	"github.com/allot-io/allot/internal/httproute"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// maxOverridesBody bounds a PUT /v1/overrides body: 10,000 overrides of
// long names.
const maxOverridesBody = 8 << 20

// overridesHTTP serves the overrides API over HTTP, for scripts: the
// gRPC methods' requests and answers as JSON (protojson, proto field
// names), with their roles (reads: reader; writes: admin).
//
//	GET    /v1/overrides?rule=&prefix=&page_size=&page_token=
//	GET    /v1/overrides/{rule}/{tenant}
//	PUT    /v1/overrides          a PutOverridesRequest: {"overrides":[{"rule":…,"tenant":…,"limit":…}]}
//	DELETE /v1/overrides/{rule}/{tenant}
func (c *Coordinator) overridesHTTP(mux *httproute.Mux) {
	s := &overridesServer{c: c}
	mux.Handle("GET /v1/overrides", c.withRole("overrides", auth.Reader, func(ctx context.Context, w http.ResponseWriter, r *http.Request) {
		v := r.URL.Query()
		size := 0
		if ps := v.Get("page_size"); ps != "" {
			n, err := strconv.Atoi(ps)
			if err != nil || n < 0 {
				writeError(w, http.StatusBadRequest, errors.New("page_size: want a number from 1 to 10000"))
				return
			}
			size = n
		}
		out, err := s.ListOverrides(ctx, &allotpb.ListOverridesRequest{Rule: v.Get("rule"), TenantPrefix: v.Get("prefix"), PageSize: uint32(size), PageToken: v.Get("page_token")})
		writeResult(w, out, err)
	}))
	mux.Handle("GET /v1/overrides/{rule}/{tenant}", c.withRole("overrides", auth.Reader, func(ctx context.Context, w http.ResponseWriter, r *http.Request) {
		out, err := s.GetOverride(ctx, &allotpb.GetOverrideRequest{Rule: r.PathValue("rule"), Tenant: r.PathValue("tenant")})
		writeResult(w, out, err)
	}))
	mux.Handle("PUT /v1/overrides", c.withRole("overrides", auth.Admin, func(ctx context.Context, w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxOverridesBody))
		if err != nil {
			writeError(w, http.StatusRequestEntityTooLarge, err)
			return
		}
		req := &allotpb.PutOverridesRequest{}
		if err := protojson.Unmarshal(body, req); err != nil {
			writeError(w, http.StatusBadRequest, errors.New("the body is not a PutOverridesRequest: "+err.Error()))
			return
		}
		out, err := s.PutOverrides(ctx, req)
		writeResult(w, out, err)
	}))
	mux.Handle("DELETE /v1/overrides/{rule}/{tenant}", c.withRole("overrides", auth.Admin, func(ctx context.Context, w http.ResponseWriter, r *http.Request) {
		out, err := s.DeleteOverrides(ctx, &allotpb.DeleteOverridesRequest{Keys: []*allotpb.OverrideKey{{Rule: r.PathValue("rule"), Tenant: r.PathValue("tenant")}}})
		writeResult(w, out, err)
	}))
}

// withRole runs h for callers holding role (or admin), when credentials
// are configured, with a context that carries the caller as a gRPC call's
// does: its identity and address for the audit log, and its bearer token
// for a follower to forward the call with.
func (c *Coordinator) withRole(name string, role auth.Role, h func(context.Context, http.ResponseWriter, *http.Request)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := peer.NewContext(r.Context(), &peer.Peer{Addr: remoteAddr(r.RemoteAddr)})
		if v := r.Header.Get("Authorization"); v != "" {
			ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", v))
		}
		a := c.authz
		if !a.Enabled() {
			h(ctx, w, r)
			return
		}
		id, reason := a.Identify(r.Header.Values("Authorization"), r.TLS)
		p, _ := peer.FromContext(ctx)
		switch {
		case reason != "":
			a.Refuse(p, "http:"+name, reason, "")
			w.Header().Set("WWW-Authenticate", `Bearer realm="allot"`)
			writeError(w, http.StatusUnauthorized, errors.New("authentication required: present a valid bearer token or client certificate"))
		case !id.Permits(role):
			a.Refuse(p, "http:"+name, authz.ReasonWrongRole, id.Name())
			writeError(w, http.StatusForbidden, errors.New("permission denied: this endpoint needs the "+role.String()+" role"))
		default:
			h(authz.WithIdentity(ctx, id), w, r)
		}
	})
}

// writeResult writes a gRPC method's answer, or its error with the HTTP
// status its code means.
func writeResult(w http.ResponseWriter, out proto.Message, err error) {
	if err == nil {
		writeProto(w, http.StatusOK, out)
		return
	}
	st := status.Convert(err)
	code := http.StatusInternalServerError
	switch st.Code() {
	case codes.InvalidArgument:
		code = http.StatusBadRequest
	case codes.NotFound:
		code = http.StatusNotFound
	case codes.FailedPrecondition:
		code = http.StatusConflict
	case codes.Unavailable, codes.DeadlineExceeded:
		code = http.StatusServiceUnavailable
	case codes.PermissionDenied:
		code = http.StatusForbidden
	case codes.Unauthenticated:
		code = http.StatusUnauthorized
	}
	writeError(w, code, errors.New(st.Message()))
}
