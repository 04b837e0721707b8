package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allot-io/allot/internal/pgserver/pgtest"
)

// TestLedgerSinkDown follows docs/billing.md with the ledger sink's
// database stopped: a coordinator process exporting to a real PostgreSQL,
// a sidecar with traffic. While the export fails, `allot status` (text
// and JSON), GET /v1/status and the status page's /v1/ui say so, with
// the cause and since when; `allot usage --from 30m` says the coordinator
// answered, that the sink is unreachable and the --from that reads what
// is still in memory, which then answers. Once the database is back and
// an export succeeds, status says nothing of a failure.
func TestLedgerSinkDown(t *testing.T) {
	if testing.Short() {
		t.Skip("runs PostgreSQL, a coordinator and a sidecar")
	}
	pg := pgtest.Start(t)
	dsn := pgtest.CreateDatabase(t, pg)
	addrs := loopbackAddrs(t, 4)
	raft, grpcAddr, httpAddr, sidecar := addrs[0], addrs[1], addrs[2], addrs[3]
	rulesFile := writeTemp(t, "rules.yaml", "rules:\n"+ruleText("plan-quota"))
	c := startProcess(t, cliEnv(), "c1", "coordinator", "--node-id", "c1", "--data-dir", t.TempDir(), "--bootstrap",
		"--raft-addr", raft, "--grpc-addr", grpcAddr, "--http-addr", httpAddr, "--rules", rulesFile,
		"--billing-window", "1s", "--report-interval", "200ms", "--agent-timeout", "2s",
		"--ledger-sink", dsn, "--ledger-export-interval", "100ms")
	procs := []*process{c}
	eventually(t, "the coordinator ready", procs, func() (bool, string) { return httpOK("http://" + httpAddr + "/readyz") })
	procs = append(procs, startProcess(t, cliEnv(), "sidecar", "agent", "--coordinators", grpcAddr, "--node-id", "gw-1",
		"--http-addr", sidecar, "--report-interval", "200ms"))
	eventually(t, "the sidecar ready", procs, func() (bool, string) { return httpOK("http://" + sidecar + "/readyz") })

	// Traffic all along: every window gets lines, and becomes final as
	// the sidecar reports past its end.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-tick.C:
				if resp, err := httpClient.Post("http://"+sidecar+"/v1/check", "application/json", strings.NewReader(`{"tenant":"acme"}`)); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}
	})
	defer func() { cancel(); wg.Wait() }()

	type export struct {
		Exported uint64 `json:"exported_lines"`
		Failing  *struct {
			Error, Cause, Since string
			Rounds              uint64
		} `json:"failing"`
	}
	status := func() (export, string) {
		t.Helper()
		code, stdout, stderr := runAllot(t, cliEnv(), "status", "--coordinator", grpcAddr, "--format", "json")
		if code != exitOK {
			t.Fatalf("allot status --format json: exit %d, %s", code, stderr)
		}
		var st struct {
			Ledger *export `json:"ledger_export"`
		}
		if err := json.Unmarshal([]byte(stdout), &st); err != nil || st.Ledger == nil {
			t.Fatalf("allot status --format json: %v, no ledger_export in\n%s", err, stdout)
		}
		return *st.Ledger, stdout
	}
	eventually(t, "lines exported", procs, func() (bool, string) {
		x, out := status()
		return x.Exported > 0 && x.Failing == nil, out
	})

	stopped := time.Now().UTC().Truncate(time.Second)
	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	var failing export
	eventually(t, "allot status to say the export fails", procs, func() (bool, string) {
		x, out := status()
		failing = x
		return x.Failing != nil && x.Failing.Rounds >= 2, out
	})
	f := failing.Failing
	since, err := time.Parse(time.RFC3339, f.Since)
	if f.Cause != "unreachable" || f.Error == "" || err != nil || since.Before(stopped) {
		t.Errorf("allot status --format json: failing %+v; want cause unreachable, an error, since %v or later", f, stopped)
	}
	code, text, stderr := runAllot(t, cliEnv(), "status", "--coordinator", grpcAddr)
	t.Logf("allot status with the sink down:\n%s", text)
	if line := lineWith(text, "ledger sink: EXPORT FAILING since "+f.Since, "unreachable: "); code != exitOK || line == "" {
		t.Errorf("allot status: exit %d, no line \"ledger sink: EXPORT FAILING since %s … unreachable: …\" in\n%s%s", code, f.Since, text, stderr)
	}
	var st struct {
		Ledger struct {
			Error string `json:"export_error"`
			Cause string `json:"export_error_cause"`
			Since string `json:"export_failing_since"`
		} `json:"ledger"`
	}
	getJSON(t, "http://"+httpAddr+"/v1/status", &st)
	if st.Ledger.Error == "" || st.Ledger.Cause != "unreachable" || st.Ledger.Since == "" {
		t.Errorf("GET /v1/status: ledger %+v; want the export's error, cause unreachable and since when", st.Ledger)
	}
	var ui struct {
		Export *struct {
			Error string `json:"error"`
			Cause string `json:"cause"`
			Since string `json:"failing_since"`
		} `json:"ledger_export"`
	}
	getJSON(t, "http://"+httpAddr+"/v1/ui", &ui)
	if ui.Export == nil || ui.Export.Error == "" || ui.Export.Cause != "unreachable" || ui.Export.Since == "" {
		t.Errorf("GET /v1/ui: ledger_export %+v; want the export's error, cause unreachable and since when", ui.Export)
	}

	// The bill: the coordinator answered; the sink did not.
	code, stdout, stderr := runAllot(t, cliEnv(), "usage", "--coordinator", grpcAddr, "--from", "30m")
	narrow := regexp.MustCompile(`narrow --from to (\S+),`).FindStringSubmatch(stderr)
	if code == exitOK || strings.Contains(stderr, "no coordinator answered") || !strings.Contains(stderr, "the ledger sink is unreachable") || narrow == nil {
		t.Fatalf("allot usage --from 30m with the sink down: exit %d, stdout %q, stderr\n%s\nwant an error saying the sink is unreachable and the --from to narrow to", code, stdout, stderr)
	}
	t.Logf("allot usage --from 30m with the sink down: %s", stderr)
	if code, stdout, stderr := runAllot(t, cliEnv(), "usage", "--coordinator", grpcAddr, "--from", narrow[1]); code != exitOK || !strings.Contains(stdout, "acme") {
		t.Errorf("allot usage --from %s, as the error says: exit %d, stdout\n%s\nstderr %s", narrow[1], code, stdout, stderr)
	}

	// The database back: the next export succeeds, and status says so.
	restart, rcancel := context.WithTimeout(context.Background(), time.Minute)
	defer rcancel()
	if err := pg.Restart(restart); err != nil {
		t.Fatal(err)
	}
	eventually(t, "allot status to stop saying the export fails", procs, func() (bool, string) {
		x, out := status()
		return x.Failing == nil && x.Exported > failing.Exported, out
	})
	if _, text, _ := runAllot(t, cliEnv(), "status", "--coordinator", grpcAddr); strings.Contains(text, "FAILING") {
		t.Errorf("allot status after the export recovered:\n%s", text)
	}
}

// getJSON decodes GET url's answer into v.
func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := httpClient.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %v %s %s", url, err, resp.Status, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v: %s", url, err, body)
	}
}
