package httplimit

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/allot-io/allot/agent"
)

// Middleware returns net/http middleware that checks every request with
// the agent. extract turns an *http.Request into the agent's agent.Request (the
// caller knows where tenant, user and priority live).
//
// A refused request is answered 429 Too Many Requests without reaching
// next, with
//
//	Retry-After: 12                          whole seconds, rounded up, at least 1
//	RateLimit-Policy: "plan-quota";q=1000;w=60
//	RateLimit: "plan-quota";r=0;t=12
//	RateLimit-Limit: 1000                    for clients of earlier drafts
//	RateLimit-Remaining: 0
//	RateLimit-Reset: 12
//	Content-Type: application/json
//
//	{"error":"rate_limited","scope":"tenant","rule":"plan-quota","retry_after_seconds":12}
//
// An admitted request gets the RateLimit fields of the rule closest to its
// limit, so a well-behaved client can slow down before it is refused. A
// request whose cost exceeds what the rule can ever admit is refused
// without Retry-After, with "retry_after_seconds": null, and with a
// "reason" naming the rule and its limit.
func Middleware(a *agent.Agent, extract func(*http.Request) agent.Request) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			d := a.Check(extract(r))
			if d.Allowed {
				SetHeaders(w.Header(), d)
				next.ServeHTTP(w, r)
				return
			}
			WriteRefusal(w, d)
		})
	}
}

// SetHeaders sets the RateLimit fields of a decision on h: the IETF
// draft's RateLimit-Policy and RateLimit (structured-field lists), the
// earlier drafts' RateLimit-Limit, -Remaining and -Reset, and, for a
// refusal, Retry-After. A decision no rule made sets nothing, but for a
// refusal for want of rules (agent.Decision.NoRules), Retry-After.
func SetHeaders(h http.Header, d agent.Decision) {
	if d.Rule == "" {
		if d.NoRules && !d.Allowed && d.RetryAfter >= 0 {
			h["Retry-After"] = []string{strconv.FormatInt(RetryAfterSeconds(d), 10)}
		}
		return
	}
	// t is when quota is back: for a refusal, when this request fits,
	// which is Retry-After (a rule refilling continuously is "back"
	// long before it is full, and a t later than Retry-After told
	// clients to wait longer than they need); otherwise when the rule is
	// full again.
	reset := ceilSeconds(d.ResetAfter)
	if !d.Allowed && d.RetryAfter >= 0 {
		reset = RetryAfterSeconds(d)
	}
	name := sfString(d.Rule)
	// The keys are written in their canonical form (textproto's, "RateLimit"
	// is "Ratelimit"), as Header.Set would: Set allocates the canonical
	// copy of a name not already canonical, on every request.
	limit, remaining, resetS := strconv.FormatInt(d.Limit, 10), strconv.FormatInt(max(d.Remaining, 0), 10), strconv.FormatInt(reset, 10)
	h["Ratelimit-Policy"] = []string{name + ";q=" + limit + ";w=" + strconv.FormatInt(ceilSeconds(d.Period), 10)}
	h["Ratelimit"] = []string{name + ";r=" + remaining + ";t=" + resetS}
	h["Ratelimit-Limit"] = []string{limit}
	h["Ratelimit-Remaining"] = []string{remaining}
	h["Ratelimit-Reset"] = []string{resetS}
	if !d.Allowed && d.RetryAfter >= 0 {
		h["Retry-After"] = []string{strconv.FormatInt(RetryAfterSeconds(d), 10)}
	}
}

// RetryAfterSeconds is a refusal's Retry-After in whole seconds: rounded
// up, and never 0, so a client never retries at once.
func RetryAfterSeconds(d agent.Decision) int64 {
	return max(ceilSeconds(d.RetryAfter), 1)
}

// refusal is the JSON body of a 429.
type refusal struct {
	Error             string `json:"error"`
	Scope             string `json:"scope"`
	Rule              string `json:"rule"`
	RetryAfterSeconds *int64 `json:"retry_after_seconds"`
	// Reason says why a refusal with no retry-after never turns into an
	// admission; empty otherwise.
	Reason string `json:"reason,omitempty"`
}

// NeverAdmissible explains a refusal no retry will turn into an admission
// (agent.Decision.RetryAfter below 0): the cost is more than the rule
// ever admits at once, naming the rule and its limit. cost is the
// request's, or 0 when the caller does not know it.
func NeverAdmissible(d agent.Decision, cost int64) string {
	what := "the request's cost"
	if cost > 0 {
		what = "cost " + strconv.FormatInt(cost, 10)
	}
	switch {
	case d.Rule == "":
		return fmt.Sprintf("%s is more than any rule can admit (at most %d)", what, int64(agent.MaxCost))
	case d.Limit == 0:
		return fmt.Sprintf("rule %s admits no request: its limit is 0", d.Rule)
	}
	return fmt.Sprintf("%s is more than rule %s ever admits at once (its limit is %d per %ss): no retry will be admitted; split the request or raise the limit",
		what, d.Rule, d.Limit, strconv.FormatFloat(d.Period.Seconds(), 'f', -1, 64))
}

// WriteRefusal answers a refused request: 429, the headers, and the JSON
// body naming the scope, so the caller knows whether to slow down, upgrade
// or spread its work. A refusal for want of rules (agent.Decision.NoRules) has
// the error "no_rules", no rule and no scope.
func WriteRefusal(w http.ResponseWriter, d agent.Decision) {
	h := w.Header()
	SetHeaders(h, d)
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store") // RFC 6585: a 429 must not be cached
	body := refusal{Error: "rate_limited", Scope: d.Scope, Rule: d.Rule}
	if d.NoRules {
		body.Error = "no_rules"
	}
	if d.RetryAfter >= 0 {
		s := RetryAfterSeconds(d)
		body.RetryAfterSeconds = &s
	} else {
		body.Reason = NeverAdmissible(d, 0)
	}
	w.WriteHeader(http.StatusTooManyRequests)
	_ = json.NewEncoder(w).Encode(body)
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(math.Ceil(d.Seconds()))
}

// sfString serializes a structured-field string (RFC 9651): quoted, with
// backslash and quote escaped. Rule names are printable ASCII already.
func sfString(s string) string {
	if !strings.ContainsAny(s, `"\`) {
		return `"` + s + `"`
	}
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
	return b.String()
}

// WriteError answers a request the caller could not decide (a malformed
// check, a wrong method) with code and {"error": msg} as JSON.
func WriteError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(struct {
		Error string `json:"error"`
	}{msg})
}
