package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// TestCLIOverrides: with real processes (a coordinator and a sidecar
// agent), overrides set, imported, listed and deleted with the CLI reach
// the agent's decisions; bad input is refused naming the file's line or
// the field, and changes nothing.
func TestCLIOverrides(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster of processes")
	}
	t.Parallel() // its own processes, ports and directories: see TestMain
	c := startSmallCluster(t, `rules:
  - name: tenant-quota
    scope: tenant
    algorithm: fixed_window
    limit: 5
    period: 1h
    intent: quota
`)
	admin, reader, at, procs, tokens, addrs := c.admin, c.reader, c.at, c.procs, c.tokens, c.addrs
	limitOf := func(tenant string) int64 { return c.check(t, tenant).Limit }

	t.Run("put and get", func(t *testing.T) {
		code, _, stderr := runAllot(t, reader, append([]string{"overrides", "put", "tenant-quota", "acme", "--limit", "50"}, at...)...)
		if code != exitFailure || !strings.Contains(stderr, "needs the admin role") {
			t.Errorf("put with a reader's token: exit %d, %q", code, stderr)
		}
		code, stdout, stderr := runAllot(t, admin, append([]string{"overrides", "put", "tenant-quota", "acme", "--limit", "50", "--expires", "72h"}, at...)...)
		if code != exitOK || !strings.Contains(stdout, "tenant-quota/acme set") {
			t.Fatalf("put: exit %d, %s%s", code, stdout, stderr)
		}
		code, stdout, stderr = runAllot(t, reader, append([]string{"overrides", "get", "tenant-quota", "acme", "--format", "jsonl"}, at...)...)
		var o overrideJSON
		if code != exitOK || json.Unmarshal([]byte(stdout), &o) != nil || o.Limit != 50 || o.Expires == "" {
			t.Fatalf("get: exit %d, %s%s", code, stdout, stderr)
		}
		eventually(t, "acme's limit of 50 on the agent", procs, func() (bool, string) {
			l := limitOf("acme")
			return l == 50, fmt.Sprint(l)
		})
	})

	t.Run("bad input", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"put", "no-such-rule", "acme", "--limit", "5"}, "overrides[0].rule"},
			{[]string{"put", "tenant-quota", "acme", "--limit", "-5"}, "must not be negative"},
			{[]string{"put", "tenant-quota", "acme", "--limit", "5", "--expires", "2020-01-01T00:00:00Z"}, "not in the future"},
			{[]string{"put", "tenant-quota", "acme", "--limit", "ten"}, "invalid value \"ten\""},
			{[]string{"delete", "tenant-quota", "ghost"}, "not found"},
		} {
			code, stdout, stderr := runAllot(t, admin, append(append([]string{"overrides"}, tc.args...), at...)...)
			if code == exitOK || !strings.Contains(stderr, tc.want) {
				t.Errorf("%v: exit %d, stdout %q, stderr %q; want an error with %q", tc.args, code, stdout, stderr, tc.want)
			}
		}
		broken := writeTemp(t, "broken.csv", "rule,tenant,limit\ntenant-quota,t1,10\ntenant-quota,t2,ten\ntenant-quota,t3,30\n")
		code, _, stderr := runAllot(t, admin, append([]string{"overrides", "import", broken}, at...)...)
		if code != exitUsage || !strings.Contains(stderr, broken+":3: limit \"ten\": not an integer") {
			t.Errorf("broken CSV: exit %d, %q", code, stderr)
		}
		refused := writeTemp(t, "refused.jsonl", `{"rule":"tenant-quota","tenant":"t1","limit":10}`+"\n"+`{"rule":"gone","tenant":"t2","limit":10}`+"\n")
		code, _, stderr = runAllot(t, admin, append([]string{"overrides", "import", refused, "--batch", "1"}, at...)...)
		if code != exitUsage || !strings.Contains(stderr, "batch 2 of 2") || !strings.Contains(stderr, refused+":2.rule") || !strings.Contains(stderr, "nothing was imported") {
			t.Errorf("a file the cluster refuses: exit %d, %q", code, stderr)
		}
		code, stdout, stderr := runAllot(t, reader, append([]string{"overrides", "list", "--format", "jsonl"}, at...)...)
		if code != exitOK || strings.Count(stdout, "\n") != 1 || !strings.Contains(stderr, "1 in the cluster") {
			t.Errorf("after refused imports the cluster holds: %s%s", stdout, stderr)
		}
	})

	t.Run("http", func(t *testing.T) {
		token := func(name string) string {
			b, err := os.ReadFile(tokens[name])
			if err != nil {
				t.Fatal(err)
			}
			return strings.TrimSpace(string(b))
		}
		call := func(method, path, who, body string) (int, string) {
			req, _ := http.NewRequest(method, "http://"+addrs[2]+path, strings.NewReader(body))
			if who != "" {
				req.Header.Set("Authorization", "Bearer "+token(who))
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		put := `{"overrides":[{"rule":"tenant-quota","tenant":"http-co","limit":77}]}`
		for _, tc := range []struct {
			method, path, who, body string
			code                    int
			want                    string
		}{
			{"PUT", "/v1/overrides", "", put, http.StatusUnauthorized, "authentication required"},
			{"PUT", "/v1/overrides", "billing", put, http.StatusForbidden, "needs the admin role"},
			{"PUT", "/v1/overrides", "admin", `{"overrides":[{"rule":"tenant-quota","tenant":"x","limit":-1}]}`, http.StatusBadRequest, "must not be negative"},
			{"PUT", "/v1/overrides", "admin", `{"overrides":`, http.StatusBadRequest, "not a PutOverridesRequest"},
			{"PUT", "/v1/overrides", "admin", put, http.StatusOK, `"count":1`},
			{"GET", "/v1/overrides/tenant-quota/http-co", "billing", "", http.StatusOK, `"limit":"77"`},
			{"GET", "/v1/overrides?rule=tenant-quota&prefix=http-", "billing", "", http.StatusOK, `"tenant":"http-co"`},
			{"DELETE", "/v1/overrides/tenant-quota/http-co", "admin", "", http.StatusOK, `"deleted":1`},
			{"DELETE", "/v1/overrides/tenant-quota/http-co", "admin", "", http.StatusNotFound, "has none"},
			{"GET", "/v1/overrides/tenant-quota/http-co", "billing", "", http.StatusNotFound, "no override"},
		} {
			code, body := call(tc.method, tc.path, tc.who, tc.body)
			if code != tc.code || !strings.Contains(body, tc.want) {
				t.Errorf("%s %s as %q: %d %s, want %d with %q", tc.method, tc.path, tc.who, code, body, tc.code, tc.want)
			}
		}
	})

	t.Run("import, list and delete", func(t *testing.T) {
		var b strings.Builder
		b.WriteString("rule,tenant,limit,weight,expires\n")
		for i := range 12000 {
			fmt.Fprintf(&b, "tenant-quota,bulk-%05d,%d,,\n", i, 100+i)
		}
		file := writeTemp(t, "bulk.csv", b.String())
		start := time.Now()
		code, stdout, stderr := runAllot(t, admin, append([]string{"overrides", "import", file}, at...)...)
		if code != exitOK || !strings.Contains(stdout, "12000 imported") || !strings.Contains(stdout, "in 3 batches") {
			t.Fatalf("import: exit %d, %s%s", code, stdout, stderr)
		}
		t.Logf("imported 12000 overrides in %v", time.Since(start).Round(time.Millisecond))
		eventually(t, "an imported limit on the agent", procs, func() (bool, string) {
			l := limitOf("bulk-11999")
			return l == 12099, fmt.Sprint(l)
		})
		code, stdout, stderr = runAllot(t, reader, append([]string{"overrides", "list", "--prefix", "bulk-0001", "--format", "csv"}, at...)...)
		if code != exitOK || strings.Count(stdout, "\n") != 11 || !strings.HasPrefix(stdout, "rule,tenant,limit,weight,anchor_day,time_zone,expires\ntenant-quota,bulk-00010,110") {
			t.Errorf("list --prefix: exit %d, %s%s", code, stdout, stderr)
		}
		code, stdout, stderr = runAllot(t, admin, append([]string{"overrides", "delete", "tenant-quota", "acme"}, at...)...)
		if code != exitOK || !strings.Contains(stdout, "deleted") {
			t.Fatalf("delete: exit %d, %s%s", code, stdout, stderr)
		}
		eventually(t, "acme back on the rule's limit", procs, func() (bool, string) {
			l := limitOf("acme")
			return l == 5, fmt.Sprint(l)
		})
	})
}
