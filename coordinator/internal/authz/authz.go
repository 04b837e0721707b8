package authz

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"

	"github.com/allot-io/allot/internal/auth"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// methodRoles are the roles each method is open to; admins and members
// may call every method. A method not listed is open to admins only.
var methodRoles = map[string]auth.Role{
	allotpb.AgentService_Report_FullMethodName:                        auth.Agent,
	allotpb.AgentService_GetRules_FullMethodName:                      auth.Agent | auth.Reader,
	rlqsv3.RateLimitQuotaService_StreamRateLimitQuotas_FullMethodName: auth.Agent,
	allotpb.RulesService_ListRules_FullMethodName:                     auth.Agent | auth.Reader,
	allotpb.RulesService_GetRule_FullMethodName:                       auth.Agent | auth.Reader,
	allotpb.OverridesService_GetOverride_FullMethodName:               auth.Reader,
	allotpb.OverridesService_ListOverrides_FullMethodName:             auth.Reader,
	allotpb.OverridesService_Changes_FullMethodName:                   auth.Reader,
	allotpb.ResetsService_ListResets_FullMethodName:                   auth.Reader,
	allotpb.ClusterService_Status_FullMethodName:                      auth.Reader,
	allotpb.UsageService_QueryUsage_FullMethodName:                    auth.Reader,
	allotpb.BalanceService_GetBalance_FullMethodName:                  auth.Reader | auth.Balance,
	allotpb.UsageService_ListNotices_FullMethodName:                   auth.Reader,
	allotpb.AuditService_ListAudit_FullMethodName:                     auth.Reader,
	allotpb.ShardService_GetShardMap_FullMethodName:                   auth.Agent | auth.Reader,
	"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo":       auth.Reader,
	"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo":  auth.Reader,
}

// OpenPrefix is the service every caller may use: health checks, for
// load balancers that hold no credential.
const OpenPrefix = "/grpc.health.v1.Health/"

// Refusal reasons, the reason label of allot_coordinator_auth_refusals_total.
const (
	ReasonNoCredential = "no_credential"
	ReasonBadToken     = "bad_token"
	ReasonExpired      = "expired_certificate"
	ReasonWrongRole    = "wrong_role"
	ReasonWrongNode    = "wrong_node"
	ReasonWrongTenant  = "wrong_tenant"
)

// Authorizer decides whether a call may proceed: it identifies the caller
// by bearer token and client certificate and checks the method's roles.
// With no credential configured it lets everything through (a loopback or
// --insecure coordinator).
type Authorizer struct {
	tokens   []func() *auth.Tokens
	certs    bool // client certificates are verified against a CA
	now      func() time.Time
	refusals *prometheus.CounterVec
	logs     *peerLog
}

func (a *Authorizer) Enabled() bool { return len(a.tokens) > 0 || a.certs }

type identityKey struct{}

// WithIdentity is ctx carrying a caller's identity, as Authorize's does.
func WithIdentity(ctx context.Context, id auth.Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// Identity is the identity of the caller whose context ctx is, proved to
// Authorize (or WithIdentity); the zero Identity when it proved none.
func Identity(ctx context.Context) auth.Identity {
	id, _ := ctx.Value(identityKey{}).(auth.Identity)
	return id
}

// Identify returns what a caller proved with its authorization headers
// and its TLS connection, or the reason it proved nothing.
func (a *Authorizer) Identify(authz []string, state *tls.ConnectionState) (auth.Identity, string) {
	var id auth.Identity
	reason := ReasonNoCredential
	for _, v := range authz {
		tok, ok := bearerToken(v)
		if !ok {
			reason = ReasonBadToken
			continue
		}
		found := false
		for _, tokens := range a.tokens {
			if g, ok := tokens().Lookup(tok); ok {
				id.Grants, found = append(id.Grants, g), true
			}
		}
		if !found {
			reason = ReasonBadToken
		}
	}
	if a.certs && state != nil && len(state.VerifiedChains) > 0 {
		grants, err := auth.CertGrants(state.VerifiedChains[0][0], a.now())
		if err != nil {
			reason = ReasonExpired
		}
		id.Grants = append(id.Grants, grants...)
	}
	if len(id.Grants) == 0 {
		return id, reason
	}
	return id, ""
}

// bearerToken reads an authorization value: "Bearer <token>", the scheme
// in any case (RFC 6750).
func bearerToken(v string) (string, bool) {
	const scheme = "bearer "
	if len(v) <= len(scheme) || !strings.EqualFold(v[:len(scheme)], scheme) {
		return "", false
	}
	return strings.TrimSpace(v[len(scheme):]), true
}

// Authorize checks a call to method, returning the context carrying the
// caller's identity or the refusal.
func (a *Authorizer) Authorize(ctx context.Context, method string) (context.Context, error) {
	if !a.Enabled() || strings.HasPrefix(method, OpenPrefix) {
		return ctx, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	var state *tls.ConnectionState
	p, _ := peer.FromContext(ctx)
	if p != nil {
		if info, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			state = &info.State
		}
	}
	id, reason := a.Identify(md.Get("authorization"), state)
	short := method[strings.LastIndexByte(method, '/')+1:]
	if reason != "" {
		a.Refuse(p, short, reason, "")
		return ctx, status.Error(codes.Unauthenticated, "authentication required: present a valid bearer token or client certificate")
	}
	roles, ok := methodRoles[method]
	if !ok {
		roles = auth.Admin
	}
	if !id.Permits(roles) {
		a.Refuse(p, short, ReasonWrongRole, id.Name())
		return ctx, status.Errorf(codes.PermissionDenied, "permission denied: %s needs the %v role", short, roles)
	}
	return WithIdentity(ctx, id), nil
}

// MayReportAs checks that the caller of a report may report as node in
// region: an agent reports only as itself.
func (a *Authorizer) MayReportAs(ctx context.Context, node, region string) error {
	if !a.Enabled() {
		return nil
	}
	id := Identity(ctx)
	if id.MayReportAs(node, region) {
		return nil
	}
	p, _ := peer.FromContext(ctx)
	a.Refuse(p, "Report", ReasonWrongNode, id.Name())
	return status.Error(codes.PermissionDenied, "permission denied: an agent may report only as the node and region its credential names")
}

// ErrNotYourTenant is the refusal of a balance the caller may not read.
// It is the same whether or not the tenant exists, so that a customer's
// credential learns nothing of other tenants.
var ErrNotYourTenant = errors.New("permission denied: this credential may not read that tenant's balance")

// MayReadBalance checks that id may read tenant's balance: a reader any
// tenant's, a balance credential its own tenant's alone. method names the
// call in the refusal's metric and log ("GetBalance", "http:balance").
func (a *Authorizer) MayReadBalance(p *peer.Peer, method string, id auth.Identity, tenant string) error {
	if !a.Enabled() || id.MayReadBalance(tenant) {
		return nil
	}
	a.Refuse(p, method, ReasonWrongTenant, id.Name())
	return ErrNotYourTenant
}

// Refuse counts a refusal and logs it, at most once a minute per peer.
func (a *Authorizer) Refuse(p *peer.Peer, method, reason, who string) {
	a.refusals.WithLabelValues(method, reason).Inc()
	host := "unknown"
	if p != nil && p.Addr != nil {
		host = p.Addr.String()
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
	}
	a.logs.warn(host, "refused a call", "peer", host, "method", method, "reason", reason, "credential", who)
}

// Unary is the gRPC server's interceptor of unary calls.
func (a *Authorizer) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	ctx, err := a.Authorize(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	return next(ctx, req)
}

// Stream is the gRPC server's interceptor of streams: the stream's
// context carries the caller's identity.
func (a *Authorizer) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, next grpc.StreamHandler) error {
	ctx, err := a.Authorize(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	return next(srv, &identifiedStream{ServerStream: ss, ctx: ctx})
}

type identifiedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *identifiedStream) Context() context.Context { return s.ctx }

// peerLog logs at most once a minute per peer, so that a flood of refused
// calls cannot flood the log; the metrics count every one.
type peerLog struct {
	log   hclog.Logger
	every time.Duration
	now   func() time.Time

	mu   sync.Mutex
	last map[string]time.Time
	// nextSweep is when a full table may be swept for expired peers
	// again; sweeps counts the sweeps.
	nextSweep time.Time
	sweeps    int
}

// maxLoggedPeers bounds the peers remembered; beyond it, peers not yet
// seen this minute are not logged.
const maxLoggedPeers = 10_000

func newPeerLog(log hclog.Logger, now func() time.Time) *peerLog {
	return &peerLog{log: log, every: time.Minute, now: now, last: map[string]time.Time{}}
}

func (l *peerLog) warn(peer, msg string, args ...any) {
	now := l.now()
	l.mu.Lock()
	if t, ok := l.last[peer]; ok && now.Sub(t) < l.every {
		l.mu.Unlock()
		return
	}
	if len(l.last) >= maxLoggedPeers {
		// Swept at most ten times a period: a table full of peers seen
		// within the minute was scanned whole by every call refused to a
		// new peer, under the lock, so that a flood from many addresses
		// cost 10,000 map steps a call (TestRefusalsLoggedOncePerPeerPerMinute
		// took 40 s under the race detector).
		if now.Before(l.nextSweep) {
			l.mu.Unlock()
			return
		}
		l.sweeps++
		l.nextSweep = now.Add(l.every / 10)
		for p, t := range l.last {
			if now.Sub(t) >= l.every {
				delete(l.last, p)
			}
		}
		if len(l.last) >= maxLoggedPeers {
			l.mu.Unlock()
			return
		}
	}
	l.last[peer] = now
	l.mu.Unlock()
	l.log.Warn(msg, args...)
}

// Config is the credentials a member is configured with.
type Config struct {
	// AdminToken is a static token with the admin role; AuthTokensFile
	// the tokens file callers' tokens are looked up in, re-read when it
	// changes.
	AdminToken, AuthTokensFile string
	// TokenFile holds the token this member presents to other members.
	TokenFile string
	// Certs says client certificates are verified against a CA, and grant
	// the roles they name.
	Certs bool
	Now   func() time.Time
	Log   hclog.Logger
	// Refusals counts refused calls by method and reason.
	Refusals *prometheus.CounterVec
}

// New reads the credentials cfg configures: the tokens callers may
// present, and the token this member presents when it joins. An error
// names the field whose file could not be read.
func New(cfg Config) (*Authorizer, *auth.TokenCredentials, error) {
	log, refusals := cfg.Log, cfg.Refusals
	a := &Authorizer{certs: cfg.Certs, now: cfg.Now, refusals: refusals, logs: newPeerLog(log.Named("auth"), cfg.Now)}
	onError := func(what string) func(error) {
		return func(err error) { log.Error("a changed "+what+" could not be loaded", "error", err) }
	}
	if cfg.AdminToken != "" {
		static := auth.StaticToken("admin-token", auth.Admin, cfg.AdminToken)
		a.tokens = append(a.tokens, func() *auth.Tokens { return static })
	}
	if cfg.AuthTokensFile != "" {
		f, err := auth.WatchTokens(cfg.AuthTokensFile, onError("tokens file"))
		if err != nil {
			return nil, nil, fmt.Errorf("AuthTokensFile: %w", err)
		}
		a.tokens = append(a.tokens, f.Tokens)
	}
	var own *auth.TokenCredentials
	if cfg.TokenFile != "" {
		var err error
		if own, err = auth.NewTokenCredentials(cfg.TokenFile, onError("token file")); err != nil {
			return nil, nil, fmt.Errorf("TokenFile: %w", err)
		}
	}
	if !a.Enabled() {
		log.Warn("no credentials configured: every caller may report usage, read the ledger and change rules; listening on loopback only, or with --insecure")
	}
	for m := range methodRoles {
		for _, r := range []string{ReasonNoCredential, ReasonBadToken, ReasonExpired, ReasonWrongRole} {
			refusals.WithLabelValues(m[strings.LastIndexByte(m, '/')+1:], r)
		}
	}
	refusals.WithLabelValues("Report", ReasonWrongNode)
	refusals.WithLabelValues("GetBalance", ReasonWrongTenant)
	refusals.WithLabelValues("http:balance", ReasonWrongTenant)
	return a, own, nil
}
