package envoy

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"slices"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/agent/forwardauth"
)

// AuthorizationServer serves envoy.service.auth.v3.Authorization/Check
// (Envoy's ext_authz filter) as the sidecar's /v1/authz serves
// forward-auth: the decision from the request's headers, by the same
// header names (forwardauth.Config), with the route from the
// request's path and the client address from its source when no header
// gives them. An admitted request goes on with the RateLimit headers on
// its response; a refused one is answered by Envoy with the deny status
// (429), Retry-After, the RateLimit headers and the JSON body of
// httplimit.WriteRefusal; a request whose headers cannot be read is answered
// 400 and not counted.
type AuthorizationServer struct {
	authv3.UnimplementedAuthorizationServer
	forwardAuth http.Handler
}

// NewAuthorizationServer returns a server deciding with a, reading the
// headers cfg names.
func NewAuthorizationServer(a *agent.Agent, cfg forwardauth.Config) *AuthorizationServer {
	return &AuthorizationServer{forwardAuth: forwardauth.Handler(a, cfg)}
}

// Register registers the service on g.
func (s *AuthorizationServer) Register(g *grpc.Server) { authv3.RegisterAuthorizationServer(g, s) }

// Check decides one request: the sidecar's forward-auth handler answers
// the request Envoy describes, and its answer becomes Envoy's.
func (s *AuthorizationServer) Check(_ context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	w := newRecorder()
	s.forwardAuth.ServeHTTP(w, httpRequest(req.GetAttributes()))
	switch w.code {
	case http.StatusOK:
		// The RateLimit headers go on the upstream's response; its caching
		// is the upstream's own business.
		w.header.Del("Cache-Control")
		return &authv3.CheckResponse{
			Status:       &rpcstatus.Status{Code: int32(codes.OK)},
			HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{ResponseHeadersToAdd: headerOptions(w.header)}},
		}, nil
	case http.StatusBadRequest:
		return denied(codes.InvalidArgument, w), nil
	}
	return denied(codes.ResourceExhausted, w), nil
}

// httpRequest rebuilds the request Envoy describes, for the header
// reader: canonical header keys, the path as X-Original-URI unless a
// route header is there, and the source address.
func httpRequest(attrs *authv3.AttributeContext) *http.Request {
	hr := attrs.GetRequest().GetHttp()
	h := make(http.Header, len(hr.GetHeaders())+1)
	for k, v := range hr.GetHeaders() {
		h[http.CanonicalHeaderKey(k)] = []string{v}
	}
	for _, kv := range hr.GetHeaderMap().GetHeaders() {
		k := http.CanonicalHeaderKey(kv.GetKey())
		v := kv.GetValue()
		if v == "" {
			v = string(kv.GetRawValue())
		}
		h[k] = append(h[k], v)
	}
	if h.Get("X-Original-Uri") == "" && h.Get("X-Forwarded-Uri") == "" && hr.GetPath() != "" {
		h.Set("X-Original-Uri", hr.GetPath())
	}
	r := &http.Request{Method: hr.GetMethod(), Header: h}
	if sa := attrs.GetSource().GetAddress().GetSocketAddress(); sa != nil {
		r.RemoteAddr = net.JoinHostPort(sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue())))
	}
	return r
}

// denied is an answer Envoy sends to the client as it is.
func denied(code codes.Code, w *recorder) *authv3.CheckResponse {
	return &authv3.CheckResponse{
		Status: &rpcstatus.Status{Code: int32(code)},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(w.code)},
			Headers: headerOptions(w.header),
			Body:    w.body.String(),
		}},
	}
}

// headerOptions converts headers, in a stable order, each replacing any
// header of the name the upstream or client response already has.
func headerOptions(h http.Header) []*corev3.HeaderValueOption {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []*corev3.HeaderValueOption
	for _, k := range keys {
		for _, v := range h[k] {
			out = append(out, &corev3.HeaderValueOption{
				Header:       &corev3.HeaderValue{Key: k, Value: v},
				AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
			})
		}
	}
	return out
}

// recorder is an http.ResponseWriter that keeps what is written.
type recorder struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func newRecorder() *recorder { return &recorder{header: http.Header{}, code: http.StatusOK} }

func (w *recorder) Header() http.Header         { return w.header }
func (w *recorder) Write(b []byte) (int, error) { return w.body.Write(b) }
func (w *recorder) WriteHeader(code int)        { w.code = code }
