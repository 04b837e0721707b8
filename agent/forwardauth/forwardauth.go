package forwardauth

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/agent/httplimit"
)

// Default header names of Config.
const (
	DefaultTenantHeader   = "X-Tenant"
	DefaultPlanHeader     = "X-Plan"
	DefaultUserHeader     = "X-User"
	DefaultIPHeader       = "X-Real-IP"
	DefaultPriorityHeader = "X-Priority"
	DefaultCostHeader     = "X-Cost"
)

// DefaultRouteHeaders are where a forward-auth request's route is read
// from, first non-empty wins: nginx's conventional X-Original-URI
// (proxy_set_header X-Original-URI $request_uri) and the X-Forwarded-Uri
// Caddy's forward_auth and Traefik's ForwardAuth set.
var DefaultRouteHeaders = []string{"X-Original-URI", "X-Forwarded-Uri"}

// NoHeader, as a header name in Config, means the attribute is
// not read at all (an empty name means the default).
const NoHeader = "-"

// Config says where Handler finds a request's
// attributes. An empty header name means the default; NoHeader turns the
// attribute off.
type Config struct {
	// TenantHeader holds the tenant (default X-Tenant). It is not read
	// when APIKeyHeader is set.
	TenantHeader string
	// APIKeyHeader, when set, holds an API key that identifies the
	// tenant: the tenant is the first 16 hex digits of the key's SHA-256
	// (APIKeyTenant), so raw keys never reach metrics or the ledger.
	// Empty (the default) means off.
	APIKeyHeader string
	// PlanHeader holds the tenant's plan (default X-Plan).
	PlanHeader string
	// UserHeader holds the user (default X-User).
	UserHeader string
	// RouteHeaders hold the original request's URI, first non-empty
	// wins; its path, without the query string, is the route (default
	// DefaultRouteHeaders). The forward-auth request's own path is the
	// authorization endpoint, never the route: without these the route
	// is empty.
	RouteHeaders []string
	// IPHeader holds the client address (default X-Real-IP). When it is
	// empty, the address is taken from X-Forwarded-For (see TrustedHops),
	// and without that from the connection's remote address.
	IPHeader string
	// TrustedHops is how many right-most X-Forwarded-For entries were
	// added by proxies you run, and are skipped: 0 (the default) takes
	// the right-most entry. With fewer entries than that, the left-most
	// is taken.
	TrustedHops int
	// PriorityHeader holds batch, interactive, critical or exempt
	// (default X-Priority); absent or empty means interactive.
	PriorityHeader string
	// CostHeader holds the request's cost, an integer from 0 to MaxCost
	// (default X-Cost); absent or empty means 1. A value of 0 is a peek
	// (agent.Request.Peek): the answer a request of cost 1 would get now,
	// with nothing spent, billed or counted as a decision.
	CostHeader string
	// DenyStatus is the status of a refusal: 429 (the default, also for
	// any value outside 400–599). nginx's auth_request passes on only
	// 401 and 403, so behind nginx use 403 and map it back to 429 there.
	DenyStatus int
}

// ErrBadForwardAuth is wrapped by every error reading a forward-auth
// request's headers.
var ErrBadForwardAuth = errors.New("agent: bad forward-auth request")

// APIKeyTenant is the tenant an API key stands for with
// Config.APIKeyHeader: the first 16 hex digits of its SHA-256.
// Name it in rules' tenant overrides:
//
//	printf %s "$KEY" | sha256sum | cut -c1-16
func APIKeyTenant(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:8])
}

// forwardAuth is a Config with its defaults filled in and its
// header names canonical, so lookups go straight to the header map.
type forwardAuth struct {
	a                                              *agent.Agent
	tenant, apiKey, plan, user, ip, priority, cost string
	routes                                         []string
	hops                                           int
	deny                                           int
}

func newHandler(cfg Config) *forwardAuth {
	name := func(h, def string) string {
		switch h {
		case NoHeader:
			return ""
		case "":
			h = def
		}
		return http.CanonicalHeaderKey(h)
	}
	f := &forwardAuth{
		tenant:   name(cfg.TenantHeader, DefaultTenantHeader),
		apiKey:   name(cfg.APIKeyHeader, ""),
		plan:     name(cfg.PlanHeader, DefaultPlanHeader),
		user:     name(cfg.UserHeader, DefaultUserHeader),
		ip:       name(cfg.IPHeader, DefaultIPHeader),
		priority: name(cfg.PriorityHeader, DefaultPriorityHeader),
		cost:     name(cfg.CostHeader, DefaultCostHeader),
		hops:     max(cfg.TrustedHops, 0),
		deny:     cfg.DenyStatus,
	}
	if f.apiKey != "" {
		f.tenant = ""
	}
	routes := cfg.RouteHeaders
	if routes == nil {
		routes = DefaultRouteHeaders
	}
	for _, h := range routes {
		if h != "" && h != NoHeader {
			f.routes = append(f.routes, http.CanonicalHeaderKey(h))
		}
	}
	if f.deny < 400 || f.deny > 599 {
		f.deny = http.StatusTooManyRequests
	}
	return f
}

// Handler serves the sidecar's /v1/authz: the forward-auth
// endpoint of nginx's auth_request, Caddy's forward_auth and Traefik's
// ForwardAuth. It answers a request of any method from its headers alone
// (the body is never read): 200 when admitted, cfg.DenyStatus (429) when
// refused, each with the RateLimit headers of SetHeaders, and a refusal
// with Retry-After and the JSON body of WriteRefusal. A header that cannot
// be read (an unknown priority, a cost that is not an integer from 0 to
// MaxCost, an attribute over the bounds of ValidateRequest) is answered
// 400 and not counted. A cost header of 0 peeks: it is answered as a
// request of cost 1 would be, and spends nothing.
func Handler(a *agent.Agent, cfg Config) http.Handler {
	f := newHandler(cfg)
	f.a = a
	return f
}

func (f *forwardAuth) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req, err := f.request(r)
	if err != nil {
		httplimit.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	d := f.a.Check(req)
	if d.Allowed {
		hd := w.Header()
		httplimit.SetHeaders(hd, d)
		hd["Cache-Control"] = noStore
		w.WriteHeader(http.StatusOK)
		return
	}
	if f.deny != http.StatusTooManyRequests {
		w = statusWriter{ResponseWriter: w, code: f.deny}
	}
	httplimit.WriteRefusal(w, d)
}

var noStore = []string{"no-store"}

// statusWriter writes code for whatever status it is given: WriteRefusal
// with another status than 429.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s statusWriter) WriteHeader(int) { s.ResponseWriter.WriteHeader(s.code) }

// get is the first value of a canonical header; "" when name is "".
func get(r *http.Request, name string) string {
	if name == "" {
		return ""
	}
	if v := r.Header[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// request reads a forward-auth request's attributes from its headers.
func (f *forwardAuth) request(r *http.Request) (agent.Request, error) {
	req := agent.Request{
		Tenant: get(r, f.tenant),
		Plan:   get(r, f.plan),
		User:   get(r, f.user),
		Route:  f.route(r),
		IP:     f.clientIP(r),
	}
	if f.apiKey != "" {
		if key := get(r, f.apiKey); key != "" {
			req.Tenant = APIKeyTenant(key)
		}
	}
	if v := get(r, f.priority); v != "" {
		p, err := agent.ParsePriority(v)
		if err != nil {
			return agent.Request{}, fmt.Errorf("%w: %s: %q is not batch, interactive, critical or exempt", ErrBadForwardAuth, f.priority, v)
		}
		req.Priority = p
	}
	if v := get(r, f.cost); v != "" {
		c, err := strconv.ParseInt(v, 10, 64)
		if err != nil || c < 0 || c > agent.MaxCost {
			return agent.Request{}, fmt.Errorf("%w: %s: must be an integer from 0 to %d", ErrBadForwardAuth, f.cost, int64(agent.MaxCost))
		}
		req.Cost, req.Peek = c, c == 0
	}
	if err := agent.ValidateRequest(req); err != nil {
		return agent.Request{}, fmt.Errorf("%w: %w", ErrBadForwardAuth, err)
	}
	return req, nil
}

// route is the path of the first non-empty route header, without its
// query string.
func (f *forwardAuth) route(r *http.Request) string {
	for _, h := range f.routes {
		if v := get(r, h); v != "" {
			if i := strings.IndexAny(v, "?#"); i >= 0 {
				v = v[:i]
			}
			return v
		}
	}
	return ""
}

// clientIP is the IP header, else the X-Forwarded-For entry TrustedHops
// from the right, else the connection's remote host.
func (f *forwardAuth) clientIP(r *http.Request) string {
	if v := get(r, f.ip); v != "" {
		return strings.TrimSpace(v)
	}
	if xff := r.Header["X-Forwarded-For"]; len(xff) > 0 {
		if ip := forwardedFor(xff, f.hops); ip != "" {
			return ip
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// forwardedFor walks X-Forwarded-For from the right (the last header
// line's last entry first), skipping hops non-empty entries; with fewer
// entries it answers the left-most.
func forwardedFor(lines []string, hops int) string {
	left := ""
	for i := len(lines) - 1; i >= 0; i-- {
		line := lines[i]
		for line != "" {
			entry := line
			if c := strings.LastIndexByte(line, ','); c >= 0 {
				entry, line = line[c+1:], line[:c]
			} else {
				line = ""
			}
			entry = strings.TrimSpace(entry)
			if entry == "" {
				continue
			}
			if hops == 0 {
				return entry
			}
			hops--
			left = entry
		}
	}
	return left
}
