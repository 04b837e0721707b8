package coordinator

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/internal/auth"
	"github.com/allot-io/allot/internal/httproute"
	"github.com/allot-io/allot/internal/openapitest"
	"github.com/allot-io/allot/internal/testwait"
	allotpb "github.com/allot-io/allot/proto"
)

// TestOpenAPIIsTheDocs: the description served is
// docs/openapi/coordinator.json, byte for byte. Edit that file and copy
// it here (cp docs/openapi/coordinator.json coordinator/openapi.json), as
// an embedded file cannot be outside the package.
func TestOpenAPIIsTheDocs(t *testing.T) {
	docs, err := os.ReadFile("../docs/openapi/coordinator.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(openAPI, docs) {
		t.Errorf("the description served (coordinator/openapi.json, %d bytes) is not docs/openapi/coordinator.json (%d bytes): cp docs/openapi/coordinator.json coordinator/openapi.json",
			len(openAPI), len(docs))
	}
}

// TestCoordinatorOpenAPI holds a running coordinator, with TLS, tokens
// and --metrics-auth, against docs/openapi/coordinator.json: every route
// its HTTP server registers is described, every operation described is
// answered, each request below and its answer (successes, refusals for
// want of a credential or a role, and errors) validate against the
// description, and every status code described is seen or its absence
// explained. /openapi.json serves the docs file.
func TestCoordinatorOpenAPI(t *testing.T) {
	const path = "../docs/openapi/coordinator.json"
	docs, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := openapitest.Load(t, path, docs)

	s := newSecured(t, 1, func(c *Config) { c.MetricsNeedAuth = true })
	l := s.nodes[0]
	mux, ok := l.http.Handler.(*httproute.Mux)
	if !ok {
		t.Fatalf("the HTTP server's handler is a %T, not the httproute.Mux whose routes can be listed", l.http.Handler)
	}
	d.CheckRoutes(t, mux.Patterns())

	// A rule, and a report that puts a line in the ledger.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cc := tlsConn(t, l.GRPCAddr(), s.ca.File, nil)
	if _, err := allotpb.NewRulesServiceClient(cc).PutRules(withToken(ctx, s.tokens["admin"]), &allotpb.PutRulesRequest{Rules: []*allotpb.Rule{quotaRule}}); err != nil {
		t.Fatal(err)
	}
	if _, err := allotpb.NewAgentServiceClient(cc).Report(withToken(ctx, s.tokens["agent"]), usageReport("gw-1", "eu-west", 1)); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "acme's line in the ledger", func() bool { return strings.Contains(ledgerText(l), "acme") })

	r, err := auth.NewReloader(auth.TLSFiles{CAFile: s.ca.File}, nil)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: r.ClientConfig()}, Timeout: 30 * time.Second}
	base := "https://" + l.HTTPAddr()
	d.Routed(t, client, base)
	as := func(who string, c openapitest.Case) openapitest.Case {
		c.Header = http.Header{}
		if who != "" {
			c.Header.Set("Authorization", "Bearer "+s.tokens[who])
		}
		return c
	}
	get := func(path, query string, status int) openapitest.Case {
		return openapitest.Case{Method: "GET", Path: path, Query: query, Status: status}
	}
	key := func(c openapitest.Case, rule, tenant string) openapitest.Case {
		c.Params = map[string]string{"rule": rule, "tenant": tenant}
		return c
	}
	bad := func(c openapitest.Case) openapitest.Case { c.BadRequest = true; return c }
	put := func(body string, status int) openapitest.Case {
		return openapitest.Case{Method: "PUT", Path: "/v1/overrides", Body: body, Status: status}
	}
	del := func(tenant string, status int) openapitest.Case {
		return key(openapitest.Case{Method: "DELETE", Path: "/v1/overrides/{rule}/{tenant}", Status: status}, "plan-quota", tenant)
	}

	// Every guarded read: without a credential, with one of the wrong
	// role, and as a reader.
	for _, p := range []string{"/metrics", "/v1/status", "/v1/usage", "/v1/notices", "/v1/ui", "/v1/overrides"} {
		d.Do(t, client, base, as("", get(p, "", 401)))
		d.Do(t, client, base, as("agent", get(p, "", 403)))
		d.Do(t, client, base, as("reader", get(p, "", 200)))
	}
	for _, c := range []openapitest.Case{
		as("", get("/healthz", "", 200)),
		as("", get("/readyz", "", 200)),
		as("", get("/ui", "", 200)),
		as("", get("/ui/", "", 200)),
		as("admin", get("/v1/status", "", 200)),
		as("reader", get("/v1/usage", "tenant=acme&rule=plan-quota&region=eu-west&from=2020-01-01T00:00:00Z&to=2100-01-01T00:00:00Z&page_size=10", 200)),
		as("reader", bad(get("/v1/usage", "from=bad", 400))),
		as("reader", bad(get("/v1/usage", "page_size=many", 400))),
		as("reader", get("/v1/usage", "page_token=forged", 400)),
		as("reader", get("/v1/notices", "pending=true&tenant=acme&rule=plan-quota&page_size=10", 200)),
		as("reader", bad(get("/v1/notices", "pending=maybe", 400))),
		as("reader", bad(get("/v1/notices", "page_size=many", 400))),
		as("reader", get("/v1/notices", "page_token=forged!", 400)),

		as("reader", get("/v1/balance", "tenant=acme", 200)),
		as("dash", get("/v1/balance", "tenant=acme&plan=pro", 200)),
		as("dash", get("/v1/balance", "tenant=initech", 403)),
		as("dash", get("/v1/usage", "", 403)),
		as("reader", bad(get("/v1/balance", "", 400))),
		as("", get("/v1/balance", "tenant=acme", 401)),
		as("agent", get("/v1/balance", "tenant=acme", 403)),

		as("admin", put(`{"overrides":[{"rule":"plan-quota","tenant":"acme","limit":100}],"validate_only":true}`, 200)),
		as("admin", put(`{"overrides":[{"rule":"plan-quota","tenant":"acme","limit":"100","expires_unix_nano":"0"},{"rule":"plan-quota","tenant":"acmecorp","weight":2}]}`, 200)),
		as("admin", bad(put(`{"overrides":[]}`, 400))),
		as("admin", bad(put(`{"overridez":[]}`, 400))),
		as("admin", put(`{"overrides":[{"rule":"no-such-rule","tenant":"acme","limit":5}]}`, 400)),
		as("admin", bad(put(`{"overrides":[{"rule":"plan-quota","tenant":"`+strings.Repeat("a", 9<<20)+`"}]}`, 413))),
		as("", put(`{"overrides":[{"rule":"plan-quota","tenant":"acme","limit":100}]}`, 401)),
		as("reader", put(`{"overrides":[{"rule":"plan-quota","tenant":"acme","limit":100}]}`, 403)),

		as("reader", get("/v1/overrides", "rule=plan-quota&prefix=acme&page_size=1", 200)),
		as("reader", bad(get("/v1/overrides", "page_size=-1", 400))),
		as("reader", get("/v1/overrides", "page_token=forged!", 400)),
		as("reader", key(get("/v1/overrides/{rule}/{tenant}", "", 200), "plan-quota", "acme")),
		as("reader", key(get("/v1/overrides/{rule}/{tenant}", "", 404), "plan-quota", "initech")),
		as("", key(get("/v1/overrides/{rule}/{tenant}", "", 401), "plan-quota", "acme")),
		as("agent", key(get("/v1/overrides/{rule}/{tenant}", "", 403), "plan-quota", "acme")),

		as("", del("acme", 401)),
		as("reader", del("acme", 403)),
		as("admin", del("acme", 200)),
		as("admin", del("acme", 404)),
	} {
		d.Do(t, client, base, c)
	}
	if _, served := d.Do(t, client, base, as("", get("/openapi.json", "", 200))); !bytes.Equal(served, docs) {
		t.Errorf("GET /openapi.json (%d bytes) is not %s (%d bytes)", len(served), path, len(docs))
	}

	busy := "a leader that cannot be reached or does not commit in time; a single healthy member always can"
	d.Coverage(t, map[string]string{
		"GET /readyz 503":                          "a member that knows no leader: this test's member has elected itself",
		"GET /v1/usage 503":                        "a ledger sink or another shard group that cannot be read: this member has neither",
		"PUT /v1/overrides 409":                    "a shard group that is not its region's home: this region is not split",
		"PUT /v1/overrides 500":                    "an error the coordinator does not expect",
		"PUT /v1/overrides 503":                    busy,
		"DELETE /v1/overrides/{rule}/{tenant} 409": "a shard group that is not its region's home: this region is not split",
		"DELETE /v1/overrides/{rule}/{tenant} 500": "an error the coordinator does not expect",
		"DELETE /v1/overrides/{rule}/{tenant} 503": busy,
	})
}
