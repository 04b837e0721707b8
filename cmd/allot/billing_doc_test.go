package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// billingDoc is docs/billing.md's example: the commands it shows and what
// it says they print.
type billingDoc struct {
	csvCmd, tableCmd []string // allot usage's arguments, without "allot"
	csvOut, tableOut []string // their output's lines
	jsonl            []string // the --format jsonl lines
	curlURL          string   // the /v1/usage call
	curlOut          string
	rule             string // the example's rule, a rules file's list item
}

// TestBillingDocExamples runs docs/billing.md's example as it describes
// it (two regions, a one-member cluster and a sidecar each, traffic split
// 2:1), with one-second billing windows, runs the doc's own commands
// against it, and checks that what the doc shows has the columns and
// fields of what they print: the same header lines, the same number of
// fields on each line, the same fields blank. The values differ (times,
// counts); the shape may not.
func TestBillingDocExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two clusters and two sidecars")
	}
	t.Parallel() // its own processes, ports and directories: see TestMain
	const docPath = "../../docs/billing.md"
	doc := readBillingDoc(t, docPath)

	rulesFile := writeTemp(t, "rules.yaml", "rules:\n"+doc.rule)
	addrs := loopbackAddrs(t, 8)
	type region struct{ name, raft, grpc, http, sidecar string }
	regions := []region{{"eu-west", addrs[0], addrs[1], addrs[2], addrs[3]}, {"us-east", addrs[4], addrs[5], addrs[6], addrs[7]}}
	var procs []*process
	for _, r := range regions {
		procs = append(procs, startProcess(t, cliEnv(), r.name, "coordinator", "--node-id", r.name+"-1", "--region", r.name,
			"--data-dir", t.TempDir(), "--bootstrap", "--raft-addr", r.raft, "--grpc-addr", r.grpc, "--http-addr", r.http,
			"--billing-window", "1s", "--report-interval", "200ms", "--rules", rulesFile))
	}
	for _, r := range regions {
		eventually(t, r.name+" ready", procs, func() (bool, string) { return httpOK("http://" + r.http + "/readyz") })
		procs = append(procs, startProcess(t, cliEnv(), "sidecar-"+r.name, "agent", "--coordinators", r.grpc, "--node-id", "gw-"+r.name,
			"--region", r.name, "--http-addr", r.sidecar, "--report-interval", "200ms"))
	}
	for _, r := range regions {
		eventually(t, "sidecar in "+r.name+" ready", procs, func() (bool, string) { return httpOK("http://" + r.sidecar + "/readyz") })
	}

	// Traffic for three windows: globex twice as much in eu-west as in
	// us-east, acme in eu-west.
	check := func(sidecar, tenant string) {
		resp, err := httpClient.Post("http://"+sidecar+"/v1/check", "application/json", strings.NewReader(`{"tenant":"`+tenant+`","user":"u1"}`))
		if err != nil {
			t.Fatalf("check at %s: %v", sidecar, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	tick := time.NewTicker(20 * time.Millisecond)
	for i, end := 0, time.Now().Add(3*time.Second); time.Now().Before(end); i++ {
		<-tick.C
		check(regions[0].sidecar, "globex")
		if i%2 == 0 {
			check(regions[1].sidecar, "globex")
			check(regions[0].sidecar, "acme")
		}
	}
	tick.Stop()

	// The doc's commands, at this run's clusters and in one of its final
	// windows that both regions' lines are in.
	replacer := strings.NewReplacer("127.0.0.1:21400", regions[0].grpc, "127.0.0.1:22400", regions[1].grpc, "127.0.0.1:21500", regions[0].http)
	var csvOut string
	var window []string
	eventually(t, "a final window with both regions' lines", procs, func() (bool, string) {
		code, stdout, stderr := runAllot(t, cliEnv(), substitute(doc.csvCmd, replacer, nil)...)
		csvOut = stdout
		window = finalTotalWindow(stdout)
		return code == exitOK && window != nil, stdout + stderr
	})
	code, tableOut, stderr := runAllot(t, cliEnv(), substitute(doc.tableCmd, replacer, window)...)
	if code != exitOK {
		t.Fatalf("the doc's table command: exit %d, %s", code, stderr)
	}
	jsonlArgs := append(substitute(doc.tableCmd, replacer, window), "--format", "jsonl")
	code, jsonlOut, stderr := runAllot(t, cliEnv(), jsonlArgs...)
	if code != exitOK {
		t.Fatalf("allot usage --format jsonl: exit %d, %s", code, stderr)
	}
	curlURL := replacer.Replace(doc.curlURL)
	curlURL = regexp.MustCompile(`from=[^&]+&to=[^&]+`).ReplaceAllString(curlURL, "from="+window[0]+"&to="+window[1])
	resp, err := httpClient.Get(curlURL)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %v %s", curlURL, err, resp.Status)
	}

	t.Run("csv", func(t *testing.T) { compareCSV(t, doc.csvOut, strings.Split(strings.TrimSpace(csvOut), "\n")) })
	t.Run("table", func(t *testing.T) {
		compareTable(t, doc.tableOut, strings.Split(strings.TrimRight(tableOut, "\n"), "\n"))
	})
	t.Run("jsonl", func(t *testing.T) { compareJSONLines(t, doc.jsonl, strings.Split(strings.TrimSpace(jsonlOut), "\n")) })
	t.Run("v1/usage", func(t *testing.T) { compareUsageJSON(t, doc.curlOut, string(body)) })
}

// substitute puts this run's addresses into a doc's command, and window's
// start and end in place of its --from and --to when they are times.
func substitute(args []string, r *strings.Replacer, window []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = r.Replace(a)
		if window != nil && i > 0 && (args[i-1] == "--from" || args[i-1] == "--to") && strings.Contains(a, "T") {
			out[i] = window[0]
			if args[i-1] == "--to" {
				out[i] = window[1]
			}
		}
	}
	return out
}

// finalTotalWindow is the start and end of a final window whose bill has
// a line for each region and a total line, or nil.
func finalTotalWindow(csvText string) []string {
	rows, err := csv.NewReader(strings.NewReader(csvText)).ReadAll()
	if err != nil || len(rows) < 2 {
		return nil
	}
	regions := map[string]map[string]bool{}
	for _, r := range rows[1:] {
		if r[2] != "true" {
			continue
		}
		if regions[r[0]] == nil {
			regions[r[0]] = map[string]bool{}
		}
		regions[r[0]][r[5]] = true
		if w := regions[r[0]]; w["eu-west"] && w["us-east"] && w["*"] {
			return []string{r[0], r[1]}
		}
	}
	return nil
}

// readBillingDoc finds the example's commands and outputs in the doc.
func readBillingDoc(t *testing.T, path string) billingDoc {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	var d billingDoc
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		switch {
		case strings.HasPrefix(line, "  - name: plan-quota") && d.rule == "":
			for ; i < len(lines) && lines[i] != "```"; i++ {
				d.rule += lines[i] + "\n"
			}
		case strings.HasPrefix(line, "$ allot usage"):
			cmd := strings.TrimPrefix(line, "$ allot ")
			for strings.HasSuffix(cmd, "\\") {
				i++
				cmd = strings.TrimSuffix(cmd, "\\") + " " + strings.TrimSpace(lines[i])
			}
			var out []string
			for i++; i < len(lines) && lines[i] != "```" && !strings.HasPrefix(lines[i], "$ "); i++ {
				out = append(out, lines[i])
			}
			i--
			if slices.Contains(strings.Fields(cmd), "csv") {
				d.csvCmd, d.csvOut = strings.Fields(cmd), out
			} else {
				d.tableCmd, d.tableOut = strings.Fields(cmd), out
			}
		case strings.HasPrefix(line, "and as JSON lines"):
			for i++; i < len(lines) && lines[i] != "```json"; i++ {
			}
			for i++; i < len(lines) && lines[i] != "```"; i++ {
				d.jsonl = append(d.jsonl, lines[i])
			}
		case strings.HasPrefix(line, "$ curl -s '") && strings.Contains(line, "/v1/usage"):
			d.curlURL = strings.TrimSuffix(strings.TrimPrefix(line, "$ curl -s '"), "'")
			d.curlOut = lines[i+1]
		}
	}
	if d.csvCmd == nil || d.tableCmd == nil || len(d.csvOut) < 2 || len(d.tableOut) < 2 || d.jsonl == nil || d.curlURL == "" || d.rule == "" {
		t.Fatalf("%s: did not find the example's rule, CSV, table, JSON lines and /v1/usage call: %+v", path, d)
	}
	return d
}

// kind is what sort of bill line a row is: a region's or the total.
func kind(region string) string {
	if region == "*" {
		return "total"
	}
	return "region"
}

// blanks says which of a line's fields are empty, as "x.x..x".
func blanks(fields []string) string {
	var b strings.Builder
	for _, f := range fields {
		if strings.TrimSpace(f) == "" {
			b.WriteByte('.')
		} else {
			b.WriteByte('x')
		}
	}
	return b.String()
}

func compareCSV(t *testing.T, docLines, realLines []string) {
	if docLines[0] != realLines[0] {
		t.Fatalf("the doc's CSV header is\n%s\nallot usage prints\n%s", docLines[0], realLines[0])
	}
	parse := func(what string, lines []string) [][]string {
		r := csv.NewReader(strings.NewReader(strings.Join(lines, "\n")))
		r.FieldsPerRecord = -1 // counted below, to say which line is short
		rows, err := r.ReadAll()
		if err != nil {
			t.Fatalf("%s CSV: %v", what, err)
		}
		return rows
	}
	doc, real := parse("the doc's", docLines), parse("allot usage's", realLines)
	for i, r := range doc[1:] {
		if len(r) != len(real[0]) {
			t.Errorf("the doc's CSV line %d has %d fields; allot usage prints %d on every line:\n%s", i+2, len(r), len(real[0]), docLines[i+1])
		}
	}
	if t.Failed() {
		return
	}
	// The doc's lines are all of windows both regions billed: a region's
	// line is compared with one of such a window, which has a share (a
	// run's first window may have one region's line alone, and no share).
	region := slices.Index(real[0], "region")
	col := func(name string) int { return slices.Index(real[0], name) }
	start, end, tenant, rule := col("window_start"), col("window_end"), col("tenant"), col("rule")
	group := func(r []string) string { return strings.Join([]string{r[start], r[end], r[tenant], r[rule]}, ",") }
	split := map[string]bool{}
	for _, r := range real[1:] {
		if r[region] == "*" {
			split[group(r)] = true
		}
	}
	want := map[string]string{}
	for _, r := range real[1:] {
		if _, ok := want[kind(r[region])]; !ok && split[group(r)] {
			want[kind(r[region])] = blanks(r)
		}
	}
	for i, r := range doc[1:] {
		if got, w := blanks(r), want[kind(r[region])]; w != "" && got != w {
			t.Errorf("the doc's CSV line %d (a %s line) has fields %s (x set, . blank); allot usage prints %s", i+2, kind(r[region]), got, w)
		}
	}
}

// tableCells cuts a table line at the header's column starts.
func tableCells(header []int, line string) []string {
	cells := make([]string, len(header))
	for i, start := range header {
		end := len(line)
		if i+1 < len(header) && header[i+1] < end {
			end = header[i+1]
		}
		if start < end {
			cells[i] = strings.TrimSpace(line[start:end])
		}
	}
	return cells
}

var tableColumn = regexp.MustCompile(`\S+`)

func compareTable(t *testing.T, docLines, realLines []string) {
	names := func(h string) []string { return tableColumn.FindAllString(h, -1) }
	if d, r := names(docLines[0]), names(realLines[0]); !slices.Equal(d, r) {
		t.Fatalf("the doc's table has columns %v; allot usage prints %v", d, r)
	}
	starts := func(h string) []int {
		var out []int
		for _, m := range tableColumn.FindAllStringIndex(h, -1) {
			out = append(out, m[0])
		}
		return out
	}
	docStarts, realStarts := starts(docLines[0]), starts(realLines[0])
	region := slices.Index(names(realLines[0]), "REGION")
	want := map[string]string{}
	for _, l := range realLines[1:] {
		if strings.TrimSpace(l) == "" {
			break // the note on windows not yet final
		}
		c := tableCells(realStarts, l)
		if _, ok := want[kind(c[region])]; !ok {
			want[kind(c[region])] = blanks(c)
		}
	}
	for i, l := range docLines[1:] {
		if strings.TrimSpace(l) == "" {
			break
		}
		for _, s := range docStarts[1:] {
			if s < len(l) && l[s-1] != ' ' {
				t.Errorf("the doc's table line %d is not aligned under its header (column at %d): %q", i+2, s, l)
			}
		}
		c := tableCells(docStarts, l)
		if got, w := blanks(c), want[kind(c[region])]; w != "" && got != w {
			t.Errorf("the doc's table line %d (a %s line) has cells %s (x set, . blank); allot usage prints %s", i+2, kind(c[region]), got, w)
		}
	}
}

// objectKeys are a JSON object's keys, sorted.
func objectKeys(t *testing.T, what, text string) ([]string, map[string]json.RawMessage) {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(text), &m); err != nil {
		t.Fatalf("%s: %v: %s", what, err, text)
	}
	return slices.Sorted(maps.Keys(m)), m
}

func compareJSONLines(t *testing.T, docLines, realLines []string) {
	want := map[string][]string{}
	for _, l := range realLines {
		keys, m := objectKeys(t, "allot usage --format jsonl", l)
		var region string
		_ = json.Unmarshal(m["region"], &region)
		if _, ok := want[kind(region)]; !ok {
			want[kind(region)] = keys
		}
	}
	for i, l := range docLines {
		keys, m := objectKeys(t, fmt.Sprintf("the doc's JSON line %d", i+1), l)
		var region string
		_ = json.Unmarshal(m["region"], &region)
		if w := want[kind(region)]; !slices.Equal(keys, w) {
			t.Errorf("the doc's JSON line %d (a %s line) has fields %v; allot usage prints %v", i+1, kind(region), keys, w)
		}
	}
}

func compareUsageJSON(t *testing.T, docText, realText string) {
	docKeys, docPage := objectKeys(t, "the doc's /v1/usage answer", docText)
	realKeys, realPage := objectKeys(t, "/v1/usage", realText)
	if !slices.Equal(docKeys, realKeys) {
		t.Errorf("the doc's /v1/usage answer has fields %v; the coordinator answers %v", docKeys, realKeys)
	}
	var docRecords, realRecords []json.RawMessage
	if json.Unmarshal(docPage["records"], &docRecords) != nil || json.Unmarshal(realPage["records"], &realRecords) != nil || len(docRecords) == 0 || len(realRecords) == 0 {
		t.Fatalf("want records in both: the doc's %s, the coordinator's %s", docPage["records"], realPage["records"])
	}
	want, _ := objectKeys(t, "a /v1/usage record", string(realRecords[0]))
	for i, r := range docRecords {
		if got, _ := objectKeys(t, "the doc's record", string(r)); !slices.Equal(got, want) {
			t.Errorf("the doc's /v1/usage record %d has fields %v; the coordinator's have %v", i+1, got, want)
		}
	}
}
