package main

import (
	"net/http"
	"strings"

	"github.com/allot-io/allot/agent/forwardauth"
)

// authzFlags are the sidecar's flags for /v1/authz, the forward-auth
// endpoint of nginx's auth_request, Caddy's forward_auth and Traefik's
// ForwardAuth: which request headers hold which attribute.
type authzFlags struct {
	tenant, apiKey, user, plan, priority, cost string
	hops, deny                                 int
}

func (z *authzFlags) register(f *flags) {
	f.StringVar(&z.tenant, "authz-tenant-header", forwardauth.DefaultTenantHeader, "/v1/authz: header holding the tenant (\"-\": not read)")
	f.StringVar(&z.apiKey, "authz-api-key-header", "", "/v1/authz: header holding an API key whose SHA-256 (16 hex digits) is the tenant, instead of --authz-tenant-header (empty: off)")
	f.StringVar(&z.user, "authz-user-header", forwardauth.DefaultUserHeader, "/v1/authz: header holding the user (\"-\": not read)")
	f.StringVar(&z.plan, "authz-plan-header", forwardauth.DefaultPlanHeader, "/v1/authz: header holding the tenant's plan (\"-\": not read)")
	f.StringVar(&z.priority, "authz-priority-header", forwardauth.DefaultPriorityHeader, "/v1/authz: header holding batch, interactive, critical or exempt (\"-\": not read)")
	f.StringVar(&z.cost, "authz-cost-header", forwardauth.DefaultCostHeader, "/v1/authz: header holding the request's cost, 0 to 4294967295 (\"-\": not read)")
	f.IntVar(&z.hops, "authz-trusted-hops", 0, "/v1/authz: right-most X-Forwarded-For entries added by your own proxies, skipped to find the client (without X-Real-IP)")
	f.IntVar(&z.deny, "authz-deny-status", http.StatusTooManyRequests, "/v1/authz: status of a refusal, 4xx or 5xx (403 behind nginx, whose auth_request passes on only 401 and 403)")
}

// config checks the flags and makes the handler's config.
func (z *authzFlags) config(cmd string) (forwardauth.Config, error) {
	for _, h := range []struct{ flag, value string }{
		{"authz-tenant-header", z.tenant}, {"authz-api-key-header", z.apiKey}, {"authz-user-header", z.user},
		{"authz-plan-header", z.plan}, {"authz-priority-header", z.priority}, {"authz-cost-header", z.cost},
	} {
		if h.value != "" && h.value != forwardauth.NoHeader && !headerName(h.value) {
			return forwardauth.Config{}, usagef(cmd, "--%s %q: not a header name", h.flag, h.value)
		}
	}
	if z.hops < 0 {
		return forwardauth.Config{}, usagef(cmd, "--authz-trusted-hops must not be negative, got %d", z.hops)
	}
	if z.deny < 400 || z.deny > 599 {
		return forwardauth.Config{}, usagef(cmd, "--authz-deny-status %d: want a 4xx or 5xx status", z.deny)
	}
	orNo := func(v string) string { // an emptied flag means not read, not the default
		if v == "" {
			return forwardauth.NoHeader
		}
		return v
	}
	return forwardauth.Config{
		TenantHeader: orNo(z.tenant), APIKeyHeader: z.apiKey, UserHeader: orNo(z.user), PlanHeader: orNo(z.plan),
		PriorityHeader: orNo(z.priority), CostHeader: orNo(z.cost), TrustedHops: z.hops, DenyStatus: z.deny,
	}, nil
}

// headerName reports whether s is an HTTP field name (an RFC 9110 token).
func headerName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
