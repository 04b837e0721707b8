package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"strings"
)

// hostileCase is one hostile input: a body (or a request it encodes), how
// often to send it, to which sidecars, and what a sidecar may answer.
type hostileCase struct {
	name    string
	method  string
	body    []byte
	shadow  *checkReq // what the body means if the sidecar takes it
	want    expect
	times   int
	sidecar int // 0: every sidecar; n: only the n-th
}

// wellFormed is a hostile request a sidecar may decide (and count) or
// refuse as beyond its bounds (400, counted nowhere): either is correct,
// as long as the ledger agrees.
func wellFormed(name string, times int, r *checkReq) hostileCase {
	b, _ := json.Marshal(r)
	return hostileCase{name: name, method: http.MethodPost, body: b, shadow: r, want: mayRefuse, times: times}
}

func malformed(name, body string) hostileCase {
	return hostileCase{name: name, method: http.MethodPost, body: []byte(body),
		shadow: &checkReq{Tenant: "hostile-malformed"}, want: mustRefuse, times: 2}
}

// hostileCases are the inputs of the hostile phase. The over-long tenant
// goes to one sidecar only (longTenantSidecar, 0 for none), because today
// it stops that sidecar's reporting for good (issue 10, failure 1).
func hostileCases(longTenantSidecar int) []hostileCase {
	big := func(n int64) *int64 { return &n }
	cases := []hostileCase{
		// Costs that wrap a signed 64-bit counter after a few requests.
		wellFormed("cost 2^62", 3, &checkReq{Tenant: "hostile-cost62", User: "u1", Route: "/v1/items/1", Cost: big(1 << 62)}),
		wellFormed("cost 2^32", 3, &checkReq{Tenant: "hostile-cost32", User: "u1", Route: "/v1/items/1", Cost: big(1 << 32)}),
		wellFormed("cost 2^63-1", 1, &checkReq{Tenant: "hostile-costmax", User: "u1", Route: "/v2/reports", Cost: big(math.MaxInt64)}),
		// Names at and beyond the bounds of keys and reports.
		wellFormed("tenant of 256 bytes", 3, &checkReq{Tenant: "t256-" + strings.Repeat("y", 251), User: "u1", Route: "/v1/search"}),
		wellFormed("user and route of 3000 bytes", 3, &checkReq{Tenant: "hostile-longkey", User: strings.Repeat("u", 3000),
			Route: "/v1/search/" + strings.Repeat("r", 3000), IP: strings.Repeat("9", 3000)}),
		wellFormed("tenant with CSV and JSON metacharacters", 3, &checkReq{Tenant: "évil,\"tenant\"\n\t<&>;", User: "u1", Route: "/v1/items/2"}),
		// A JSON null is an empty request: the empty tenant.
		{name: "null body", method: http.MethodPost, body: []byte("null"), shadow: &checkReq{}, want: mayRefuse, times: 1},
		malformed("truncated JSON", `{"tenant":"hostile-malformed",`),
		malformed("unknown field", `{"tenant":"hostile-malformed","usr":"x"}`),
		malformed("data after the object", `{"tenant":"hostile-malformed"} {"tenant":"x"}`),
		malformed("negative cost", `{"tenant":"hostile-malformed","cost":-1}`),
		malformed("fractional cost", `{"tenant":"hostile-malformed","cost":1.5}`),
		malformed("cost beyond int64", `{"tenant":"hostile-malformed","cost":1e30}`),
		malformed("unknown priority", `{"tenant":"hostile-malformed","priority":"urgent"}`),
		malformed("tenant not a string", `{"tenant":{"a":1}}`),
		malformed("an array", `[{"tenant":"hostile-malformed"}]`),
		malformed("empty body", ``),
		malformed("deep nesting", strings.Repeat("[", 20000)+strings.Repeat("]", 20000)),
		malformed("body over 64 KiB", `{"tenant":"hostile-malformed","user":"`+strings.Repeat("z", 70<<10)+`"}`),
		{name: "GET", method: http.MethodGet, shadow: &checkReq{Tenant: "hostile-malformed"}, want: mustRefuse, times: 1},
	}
	if longTenantSidecar > 0 {
		c := wellFormed("tenant of 300 bytes", 3, &checkReq{Tenant: "t300-" + strings.Repeat("x", 295), User: "u1", Route: "/v1/items/3"})
		c.sidecar = longTenantSidecar
		cases = append(cases, c)
	}
	return cases
}

// sendHostile sends every hostile case and returns what was answered.
func sendHostile(ctx context.Context, cl *client, longTenantSidecar int, only *regexp.Regexp, log *phaseLog) *tally {
	t := newTally(len(cl.sidecars), len(cl.rules.defs))
	for _, hc := range hostileCases(longTenantSidecar) {
		if !only.MatchString(hc.name) {
			continue
		}
		codes := map[int]int{}
		for node := range cl.sidecars {
			if hc.sidecar != 0 && hc.sidecar != node+1 {
				continue
			}
			for range hc.times {
				codes[cl.check(ctx, t, node, hc.method, hc.body, hc.shadow, hc.want)]++
			}
		}
		log.logf("hostile: %-40s answered %s", hc.name, codeList(codes))
	}
	return t
}

func codeList(codes map[int]int) string {
	var parts []string
	for _, c := range []int{200, 429, 400, 405, 413, 0} {
		if n := codes[c]; n > 0 {
			name := fmt.Sprint(c)
			if c == 0 {
				name = "error"
			}
			parts = append(parts, fmt.Sprintf("%d×%s", n, name))
		}
	}
	for c, n := range codes {
		switch c {
		case 200, 429, 400, 405, 413, 0:
		default:
			parts = append(parts, fmt.Sprintf("%d×%d", n, c))
		}
	}
	return strings.Join(parts, " ")
}
