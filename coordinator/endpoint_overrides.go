package coordinator

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/allot-io/allot/coordinator/internal/authz"
	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/allot-io/allot/internal/auth"
	"github.com/allot-io/allot/internal/httproute"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// maxListPage bounds a ListOverrides page.
const maxListPage = 10_000

type overridesServer struct {
	allotpb.UnimplementedOverridesServiceServer
	c *Coordinator
}

// PutOverrides validates and applies overrides, all or none, on the home
// group's leader. An override equal to the one in force is left as it is:
// the answer's count is how many changed, and when none did the version
// stays.
func (s *overridesServer) PutOverrides(ctx context.Context, req *allotpb.PutOverridesRequest) (*allotpb.PutOverridesResponse, error) {
	c := s.c
	if !c.isHome() {
		return nil, c.notHome("PutOverrides")
	}
	cmd := &fsmpb.OverridesCommand{Put: req.GetOverrides(), NowUnixNano: c.now().UnixNano()}
	annotate(ctx, attribute.Int("allot.overrides", len(cmd.Put)), attribute.Bool("allot.validate_only", req.GetValidateOnly()))
	if len(cmd.Put) == 0 {
		c.metrics.adminRequests.WithLabelValues("PutOverrides", "invalid").Inc()
		return nil, badRequest("overrides: none given", &errdetails.BadRequest_FieldViolation{Field: "overrides", Description: "none given"})
	}
	// Validated on the leader, whose rule set a follower's may lag.
	out, err := onLeader(ctx, c, func() (*allotpb.PutOverridesResponse, error) {
		if err := c.checkOverrides(cmd); err != nil || req.GetValidateOnly() {
			var v uint64
			c.fsm.Read(func(st *state.State) { v = st.OverridesVersion() })
			return &allotpb.PutOverridesResponse{Version: v}, err
		}
		// Only what changes is proposed: an override put again as it is
		// takes no version, and a put of nothing new none at all.
		var v uint64
		c.fsm.Read(func(st *state.State) { cmd.Put, v = st.ChangedOverrides(cmd.GetPut()), st.OverridesVersion() })
		if len(cmd.Put) == 0 {
			return &allotpb.PutOverridesResponse{Version: v}, nil
		}
		cmd.Audit = c.auditStamp(ctx, "PutOverrides")
		v, err := c.applyOverrides(ctx, cmd)
		return &allotpb.PutOverridesResponse{Version: v, Count: uint32(len(cmd.Put))}, err
	}, func(ctx context.Context, addr string) (*allotpb.PutOverridesResponse, error) {
		return allotpb.NewOverridesServiceClient(c.peers.conn(addr)).PutOverrides(ctx, req)
	})
	if status.Code(err) == codes.InvalidArgument {
		c.metrics.adminRequests.WithLabelValues("PutOverrides", "invalid").Inc()
		return nil, err
	}
	c.metrics.adminRequests.WithLabelValues("PutOverrides", resultLabel(err)).Inc()
	return out, grpcError(err)
}

// DeleteOverrides deletes overrides, all or none: a key with no override
// is NOT_FOUND, and nothing is deleted.
func (s *overridesServer) DeleteOverrides(ctx context.Context, req *allotpb.DeleteOverridesRequest) (*allotpb.DeleteOverridesResponse, error) {
	c := s.c
	if !c.isHome() {
		return nil, c.notHome("DeleteOverrides")
	}
	cmd := &fsmpb.OverridesCommand{Delete: req.GetKeys(), NowUnixNano: c.now().UnixNano()}
	annotate(ctx, attribute.Int("allot.overrides", len(cmd.Delete)))
	if len(cmd.Delete) == 0 {
		c.metrics.adminRequests.WithLabelValues("DeleteOverrides", "invalid").Inc()
		return nil, badRequest("keys: none given", &errdetails.BadRequest_FieldViolation{Field: "keys", Description: "none given"})
	}
	out, err := onLeader(ctx, c, func() (*allotpb.DeleteOverridesResponse, error) {
		if err := c.checkOverrides(cmd); err != nil {
			return nil, err
		}
		cmd.Audit = c.auditStamp(ctx, "DeleteOverrides")
		v, err := c.applyOverrides(ctx, cmd)
		return &allotpb.DeleteOverridesResponse{Version: v, Deleted: uint32(len(cmd.Delete))}, err
	}, func(ctx context.Context, addr string) (*allotpb.DeleteOverridesResponse, error) {
		return allotpb.NewOverridesServiceClient(c.peers.conn(addr)).DeleteOverrides(ctx, req)
	})
	if c := status.Code(err); c == codes.NotFound || c == codes.InvalidArgument {
		s.c.metrics.adminRequests.WithLabelValues("DeleteOverrides", "invalid").Inc()
		return nil, err
	}
	c.metrics.adminRequests.WithLabelValues("DeleteOverrides", resultLabel(err)).Inc()
	return out, grpcError(err)
}

// GetOverride answers from this member's replica.
func (s *overridesServer) GetOverride(_ context.Context, req *allotpb.GetOverrideRequest) (*allotpb.Override, error) {
	var out *allotpb.Override
	s.c.fsm.Read(func(st *state.State) { out, _ = st.Override(req.GetRule(), req.GetTenant()) })
	if out == nil {
		return nil, status.Errorf(codes.NotFound, "tenant %q has no override under rule %q", req.GetTenant(), req.GetRule())
	}
	return out, nil
}

// ListOverrides pages through the overrides by rule and tenant, from this
// member's replica.
func (s *overridesServer) ListOverrides(_ context.Context, req *allotpb.ListOverridesRequest) (*allotpb.ListOverridesResponse, error) {
	size := int(req.GetPageSize())
	switch {
	case size == 0:
		size = 1000
	case size > maxListPage:
		return nil, badRequest(fmt.Sprintf("page_size: at most %d, got %d", maxListPage, size),
			&errdetails.BadRequest_FieldViolation{Field: "page_size", Description: fmt.Sprintf("at most %d", maxListPage)})
	}
	var after [2]string
	if tok := req.GetPageToken(); tok != "" {
		var err error
		if after, err = decodeOverrideToken(tok); err != nil {
			return nil, badRequest("page_token: "+err.Error(), &errdetails.BadRequest_FieldViolation{Field: "page_token", Description: err.Error()})
		}
	}
	out := &allotpb.ListOverridesResponse{}
	s.c.fsm.Read(func(st *state.State) {
		out.Version, out.Total = st.OverridesVersion(), uint64(st.OverridesCount())
		st.ListOverrides(req.GetRule(), req.GetTenantPrefix(), after, func(o *allotpb.Override) bool {
			if len(out.Overrides) == size {
				last := out.Overrides[size-1]
				out.NextPageToken = encodeOverrideToken(last.GetRule(), last.GetTenant())
				return false
			}
			out.Overrides = append(out.Overrides, o)
			return true
		})
	})
	return out, nil
}

// Changes answers what changed since a version, from this member's
// replica: how shard groups mirror the home group's overrides.
func (s *overridesServer) Changes(_ context.Context, req *allotpb.OverrideChangesRequest) (*allotpb.OverridesDelta, error) {
	limit := int(req.GetLimit())
	if limit == 0 || limit > state.MaxOverridesPerCommand {
		limit = state.MaxOverridesPerCommand
	}
	var out *allotpb.OverridesDelta
	s.c.fsm.Read(func(st *state.State) {
		out = st.OverridesSince(req.GetSince(), limit)
		if out == nil {
			out = &allotpb.OverridesDelta{Version: st.OverridesVersion()}
		}
	})
	return out, nil
}

// checkOverrides validates a command before it is proposed.
func (c *Coordinator) checkOverrides(cmd *fsmpb.OverridesCommand) error {
	var err error
	c.fsm.Read(func(st *state.State) { err = st.CheckOverrides(cmd) })
	return overridesError(err)
}

func (c *Coordinator) applyOverrides(ctx context.Context, cmd *fsmpb.OverridesCommand) (uint64, error) {
	res, err := c.apply(ctx, state.CmdOverrides, cmd, 10*time.Second)
	if err != nil {
		if errors.Is(err, ErrNotLeader) {
			return 0, err
		}
		return 0, overridesError(err)
	}
	return res.(uint64), nil
}

// overridesError turns validation errors into INVALID_ARGUMENT with one
// field violation per problem, and a missing override into NOT_FOUND.
func overridesError(err error) error {
	var es rules.Errors
	switch {
	case err == nil:
		return nil
	case errors.Is(err, state.ErrOverrideNotFound):
		return status.Error(codes.NotFound, err.Error())
	case !errors.As(err, &es):
		return err
	}
	vs := make([]*errdetails.BadRequest_FieldViolation, len(es))
	for i, e := range es {
		vs[i] = &errdetails.BadRequest_FieldViolation{Field: e.Field, Description: e.Msg}
	}
	return badRequest(err.Error(), vs...)
}

func encodeOverrideToken(rule, tenant string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(rule + "\x00" + tenant))
}

func decodeOverrideToken(tok string) ([2]string, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return [2]string{}, errors.New("not a token a previous page gave")
	}
	rule, tenant, ok := strings.Cut(string(b), "\x00")
	if !ok {
		return [2]string{}, errors.New("not a token a previous page gave")
	}
	return [2]string{rule, tenant}, nil
}

// mirrorOverrides takes in what changed in the home group's overrides
// since this group last did: a page per call to Changes, a command per
// page, until in step. Only the leader's proposals take effect.
func (c *Coordinator) mirrorOverrides(ctx context.Context) error {
	var lastErr error
	for _, a := range c.cfg.ShardHome {
		for {
			var have uint64
			c.fsm.Read(func(st *state.State) { have = st.MirroredOverridesVersion() })
			rctx, cancel := context.WithTimeout(withToken(ctx, c.joinToken()), 10*time.Second)
			d, err := allotpb.NewOverridesServiceClient(c.peers.conn(a)).Changes(rctx, &allotpb.OverrideChangesRequest{Since: have})
			cancel()
			if err != nil {
				lastErr = err
				break
			}
			if d.GetVersion() == have && !d.GetFull() {
				return nil
			}
			cmd := &fsmpb.OverridesCommand{Mirror: true, Full: d.GetFull(), Put: d.GetOverrides(), MirrorVersion: d.GetVersion(), NowUnixNano: c.now().UnixNano()}
			if _, err := c.apply(ctx, state.CmdOverrides, cmd, 10*time.Second); err != nil {
				return fmt.Errorf("mirroring the home group's overrides: %w", err)
			}
			c.log.Info("overrides mirrored from the home group", "version", d.GetVersion(), "changes", len(d.GetOverrides()))
			if !d.GetMore() {
				return nil
			}
		}
	}
	return lastErr
}

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
