package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/grpc"
)

const overridesAbout = `
Reads and changes per-tenant overrides: one rule's limit and/or weight for
one tenant, kept by the cluster apart from the rules, so that a change
reaches every agent within a report interval without the rule set being
sent again. An override wins over the rules file's tenants section, which
wins over the tenant's plan (docs/rules.md#overrides).

  put RULE TENANT    set an override (--limit N, --weight W, --expires WHEN)
  get RULE TENANT    print one override
  list               print overrides (--rule R, --prefix P), paged through
  delete RULE TENANT delete one override
  import FILE        set many, from CSV or JSON lines, all or none

Changes need an admin credential when the cluster has credentials.`

func runOverrides(ctx context.Context, e *env) error {
	return runSubcommand(ctx, e, "overrides", overridesAbout, []subcommand{
		{"put", runOverridesPut},
		{"get", runOverridesGet},
		{"list", runOverridesList},
		{"delete", runOverridesDelete},
		{"import", runOverridesImport},
	})
}

// overrideJSON is an override as the CLI prints and imports it.
type overrideJSON struct {
	Rule    string  `json:"rule"`
	Tenant  string  `json:"tenant"`
	Limit   int64   `json:"limit,omitempty"`
	Weight  float64 `json:"weight,omitempty"`
	Expires string  `json:"expires,omitempty"` // RFC 3339
	Version uint64  `json:"version,omitempty"`
	Updated string  `json:"updated,omitempty"`
}

func overrideOut(o *allotpb.Override) overrideJSON {
	j := overrideJSON{Rule: o.GetRule(), Tenant: o.GetTenant(), Limit: o.GetLimit(), Weight: o.GetWeight(), Version: o.GetVersion()}
	if ns := o.GetExpiresUnixNano(); ns != 0 {
		j.Expires = time.Unix(0, ns).UTC().Format(time.RFC3339)
	}
	if ns := o.GetUpdatedUnixNano(); ns != 0 {
		j.Updated = time.Unix(0, ns).UTC().Format(time.RFC3339)
	}
	return j
}

// parseExpiry reads --expires: an RFC 3339 time, or a duration from now
// ("72h"). Empty is never.
func parseExpiry(s string, now time.Time) (int64, error) {
	if s == "" {
		return 0, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return 0, fmt.Errorf("%q: a duration from now must be positive", s)
		}
		return now.Add(d).UnixNano(), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return 0, fmt.Errorf("%q: want an RFC 3339 time (2026-12-24T00:00:00Z) or a duration from now (72h)", s)
	}
	return t.UnixNano(), nil
}

const overridesPutAbout = `
Sets RULE's override for TENANT: --limit replaces the rule's limit (per
the rule's period), --weight the tenant's weight under a global rule;
at least one. --expires ends it at a time (RFC 3339) or after a duration
(72h): a temporary raise for an event. The cluster checks it against its
rules (an unknown rule, a negative limit or an expiry in the past is
refused, naming the field) and prints the new overrides version.`

func runOverridesPut(ctx context.Context, e *env) error {
	const cmd = "overrides put"
	f := newFlags(e, cmd, "RULE TENANT [--limit N] [--weight W] [--expires WHEN] [flags]", overridesPutAbout)
	var cf clientFlags
	var limit int64
	var weight float64
	var expires string
	cf.register(f)
	f.Int64Var(&limit, "limit", 0, "the tenant's limit per the rule's period")
	f.Float64Var(&weight, "weight", 0, "the tenant's weight under a global rule")
	f.StringVar(&expires, "expires", "", "when the override ends: an RFC 3339 time or a duration from now")
	args, err := parseArgs(f, e)
	if err != nil {
		return err
	}
	if len(args) != 2 {
		return usagef(cmd, "want RULE and TENANT, got %d arguments", len(args))
	}
	at, err := parseExpiry(expires, time.Now())
	if err != nil {
		return usagef(cmd, "--expires %v", err)
	}
	o := &allotpb.Override{Rule: args[0], Tenant: args[1], Limit: limit, Weight: weight, ExpiresUnixNano: at}
	resp, err := putOverrides(ctx, &cf, cmd, []*allotpb.Override{o}, false)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "overrides version %d: %s/%s set\n", resp.GetVersion(), o.Rule, o.Tenant)
	return nil
}

func putOverrides(ctx context.Context, cf *clientFlags, cmd string, list []*allotpb.Override, validateOnly bool) (*allotpb.PutOverridesResponse, error) {
	resp, err := sendOverrides(ctx, cf, cmd, list, validateOnly)
	if errors.Is(err, errRejected) {
		return nil, &usageError{err: fmt.Errorf("the cluster refused the overrides: %w", err)}
	}
	return resp, err
}

// sendOverrides is one PutOverrides call; a refusal wraps errRejected.
func sendOverrides(ctx context.Context, cf *clientFlags, cmd string, list []*allotpb.Override, validateOnly bool) (*allotpb.PutOverridesResponse, error) {
	cl, err := cf.dial()
	if err != nil {
		return nil, &usageError{err: err, hint: cmd}
	}
	defer cl.Close()
	var resp *allotpb.PutOverridesResponse
	err = cf.once(ctx, cl, func(ctx context.Context, cc *grpc.ClientConn) error {
		var err error
		resp, err = allotpb.NewOverridesServiceClient(cc).PutOverrides(ctx, &allotpb.PutOverridesRequest{Overrides: list, ValidateOnly: validateOnly})
		return err
	})
	if err != nil && !errors.Is(err, errRejected) {
		return nil, fmt.Errorf("putting overrides: %w", err)
	}
	return resp, err
}

// entryIndex finds the overrides[N] a refusal names.
var entryIndex = regexp.MustCompile(`overrides\[(\d+)\]`)

func runOverridesGet(ctx context.Context, e *env) error {
	return onRuleTenant(ctx, e, "overrides get", "Prints RULE's override for TENANT as JSON, from the member called.",
		func(ctx context.Context, cc *grpc.ClientConn, rule, tenant string) error {
			o, err := allotpb.NewOverridesServiceClient(cc).GetOverride(ctx, &allotpb.GetOverrideRequest{Rule: rule, Tenant: tenant})
			if err != nil {
				return err
			}
			return json.NewEncoder(e.stdout).Encode(overrideOut(o))
		})
}

// onRuleTenant runs a command of two arguments, RULE and TENANT, making
// one call to the cluster.
func onRuleTenant(ctx context.Context, e *env, cmd, about string, call func(ctx context.Context, cc *grpc.ClientConn, rule, tenant string) error) error {
	f := newFlags(e, cmd, "RULE TENANT [flags]", about)
	var cf clientFlags
	cf.register(f)
	args, err := parseArgs(f, e)
	if err != nil {
		return err
	}
	if len(args) != 2 {
		return usagef(cmd, "want RULE and TENANT, got %d arguments", len(args))
	}
	cl, err := cf.dial()
	if err != nil {
		return &usageError{err: err, hint: cmd}
	}
	defer cl.Close()
	return cf.once(ctx, cl, func(ctx context.Context, cc *grpc.ClientConn) error { return call(ctx, cc, args[0], args[1]) })
}

const overridesListAbout = `
Prints the cluster's overrides by rule and tenant, every page of them:
--rule and --prefix narrow the list. --format table (the default), jsonl
(one JSON object per line, what 'overrides import' reads) or csv (the
same). The total and the overrides version go to stderr.`

func runOverridesList(ctx context.Context, e *env) error {
	const cmd = "overrides list"
	f := newFlags(e, cmd, "[--rule R] [--prefix P] [--format table|jsonl|csv] [flags]", overridesListAbout)
	var cf clientFlags
	var rule, prefix, format string
	cf.register(f)
	f.StringVar(&rule, "rule", "", "list this rule's overrides only")
	f.StringVar(&prefix, "prefix", "", "list tenants with this prefix only")
	f.StringVar(&format, "format", "table", "output format: table, jsonl or csv")
	args, err := parseArgs(f, e)
	if err != nil {
		return err
	}
	if len(args) > 0 {
		return usagef(cmd, "takes no arguments, got %q", args[0])
	}
	if format != "table" && format != "jsonl" && format != "csv" {
		return usagef(cmd, "--format %q: want table, jsonl or csv", format)
	}
	cl, err := cf.dial()
	if err != nil {
		return &usageError{err: err, hint: cmd}
	}
	defer cl.Close()
	out := newOverrideWriter(e.stdout, format)
	tok := ""
	var last *allotpb.ListOverridesResponse
	for {
		err = cf.once(ctx, cl, func(ctx context.Context, cc *grpc.ClientConn) error {
			var err error
			last, err = allotpb.NewOverridesServiceClient(cc).ListOverrides(ctx, &allotpb.ListOverridesRequest{Rule: rule, TenantPrefix: prefix, PageSize: 5000, PageToken: tok})
			return err
		})
		if err != nil {
			return fmt.Errorf("listing overrides: %w", err)
		}
		for _, o := range last.GetOverrides() {
			out.write(overrideOut(o))
		}
		if tok = last.GetNextPageToken(); tok == "" {
			break
		}
	}
	if err := out.flush(); err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "overrides version %d, %d in the cluster\n", last.GetVersion(), last.GetTotal())
	return nil
}

// overrideWriter prints overrides as a table, JSON lines or CSV.
type overrideWriter struct {
	format string
	tw     *tabwriter.Writer
	cw     *csv.Writer
	enc    *json.Encoder
}

func newOverrideWriter(w io.Writer, format string) *overrideWriter {
	ow := &overrideWriter{format: format}
	switch format {
	case "table":
		ow.tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(ow.tw, "RULE\tTENANT\tLIMIT\tWEIGHT\tEXPIRES\tVERSION")
	case "csv":
		ow.cw = csv.NewWriter(w)
		_ = ow.cw.Write(csvColumns)
	default:
		ow.enc = json.NewEncoder(w)
	}
	return ow
}

var csvColumns = []string{"rule", "tenant", "limit", "weight", "expires"}

func (ow *overrideWriter) write(o overrideJSON) {
	num := func(n int64) string {
		if n == 0 {
			return ""
		}
		return strconv.FormatInt(n, 10)
	}
	flt := func(f float64) string {
		if f == 0 {
			return ""
		}
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	switch ow.format {
	case "table":
		fmt.Fprintf(ow.tw, "%s\t%s\t%s\t%s\t%s\t%d\n", o.Rule, o.Tenant, orDash(num(o.Limit)), orDash(flt(o.Weight)), orDash(o.Expires), o.Version)
	case "csv":
		_ = ow.cw.Write([]string{o.Rule, o.Tenant, num(o.Limit), flt(o.Weight), o.Expires})
	default:
		o.Version, o.Updated = 0, ""
		_ = ow.enc.Encode(o)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (ow *overrideWriter) flush() error {
	switch {
	case ow.tw != nil:
		return ow.tw.Flush()
	case ow.cw != nil:
		ow.cw.Flush()
		return ow.cw.Error()
	}
	return nil
}

func runOverridesDelete(ctx context.Context, e *env) error {
	return onRuleTenant(ctx, e, "overrides delete", "Deletes RULE's override for TENANT: the tenant's limit is the rules file's again. An override that does not exist is an error.",
		func(ctx context.Context, cc *grpc.ClientConn, rule, tenant string) error {
			resp, err := allotpb.NewOverridesServiceClient(cc).DeleteOverrides(ctx, &allotpb.DeleteOverridesRequest{Keys: []*allotpb.OverrideKey{{Rule: rule, Tenant: tenant}}})
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "overrides version %d: %s/%s deleted\n", resp.GetVersion(), rule, tenant)
			return nil
		})
}

const overridesImportAbout = `
Sets the overrides FILE lists, all or none. FILE is CSV with a header
line naming its columns (rule and tenant, then any of limit, weight and
expires), or JSON lines ({"rule":..,"tenant":..,"limit":..}) — told apart
by --format, or by the file's extension (.csv; anything else is JSON
lines); - reads stdin. expires is an RFC 3339 time.

Every line is read and checked first: a broken line is reported as
FILE:LINE and nothing is sent. The cluster then checks every batch
(validate only) before any is applied, so an override it refuses leaves
the cluster as it was; batches of --batch are applied after that.`

// importBatch is how many overrides one import call sends.
const importBatch = 5000

func runOverridesImport(ctx context.Context, e *env) error {
	const cmd = "overrides import"
	f := newFlags(e, cmd, "FILE [--format csv|jsonl] [flags]", overridesImportAbout)
	var cf clientFlags
	var format string
	batch := importBatch
	cf.register(f)
	f.StringVar(&format, "format", "", "csv or jsonl; default: by the file's extension")
	f.IntVar(&batch, "batch", importBatch, "overrides per call (at most 10000)")
	args, err := parseArgs(f, e)
	if err != nil {
		return err
	}
	file, err := exactlyOne(cmd, "overrides file", args)
	if err != nil {
		return err
	}
	if batch < 1 || batch > 10000 {
		return usagef(cmd, "--batch %d: want 1 to 10000", batch)
	}
	if format == "" {
		format = "jsonl"
		if strings.HasSuffix(strings.ToLower(file), ".csv") {
			format = "csv"
		}
	}
	if format != "csv" && format != "jsonl" {
		return usagef(cmd, "--format %q: want csv or jsonl", format)
	}
	in := e.stdin
	if file != "-" {
		fh, err := os.Open(file)
		if err != nil {
			return &usageError{err: err}
		}
		defer fh.Close()
		in = fh
	}
	list, lines, err := readOverrides(in, file, format, time.Now())
	if err != nil {
		return &usageError{err: err}
	}
	if len(list) == 0 {
		return usagef(cmd, "%s holds no overrides", file)
	}
	var batches [][]*allotpb.Override
	for i := 0; i < len(list); i += batch {
		batches = append(batches, list[i:min(i+batch, len(list))])
	}
	for i, b := range batches {
		if _, err := sendOverrides(ctx, &cf, cmd, b, true); err != nil {
			// The cluster names the entry of the batch: name the line.
			msg := entryIndex.ReplaceAllStringFunc(err.Error(), func(m string) string {
				n, _ := strconv.Atoi(entryIndex.FindStringSubmatch(m)[1])
				if j := i*batch + n; j < len(lines) {
					return fmt.Sprintf("%s:%d", file, lines[j])
				}
				return m
			})
			err = fmt.Errorf("batch %d of %d: %s; nothing was imported", i+1, len(batches), msg)
			if strings.Contains(msg, errRejected.Error()) {
				return &usageError{err: err}
			}
			return err
		}
	}
	var v uint64
	for i, b := range batches {
		resp, err := putOverrides(ctx, &cf, cmd, b, false)
		if err != nil {
			return fmt.Errorf("%s: batch %d of %d: %w; the %d overrides before it were imported", file, i+1, len(batches), err, i*batch)
		}
		v = resp.GetVersion()
	}
	fmt.Fprintf(e.stdout, "overrides version %d: %d imported from %s in %d batches\n", v, len(list), file, len(batches))
	return nil
}

// readOverrides reads an import file; an error names FILE:LINE and the
// field.
func readOverrides(in io.Reader, file, format string, now time.Time) ([]*allotpb.Override, []int, error) {
	if format == "csv" {
		return readOverridesCSV(in, file, now)
	}
	var out []*allotpb.Override
	var lines []int
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	seen := map[[2]string]int{}
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		var j overrideJSON
		dec := json.NewDecoder(strings.NewReader(text))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&j); err != nil {
			return nil, nil, fmt.Errorf("%s:%d: %v", file, line, err)
		}
		o, err := overrideFrom(j.Rule, j.Tenant, j.Limit, j.Weight, j.Expires, now)
		if err == nil {
			err = once(seen, o, line)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%s:%d: %v", file, line, err)
		}
		out = append(out, o)
		lines = append(lines, line)
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", file, err)
	}
	return out, lines, nil
}

func readOverridesCSV(in io.Reader, file string, now time.Time) ([]*allotpb.Override, []int, error) {
	r := csv.NewReader(in)
	r.TrimLeadingSpace = true
	head, err := r.Read()
	if err != nil {
		return nil, nil, fmt.Errorf("%s:1: reading the header: %v", file, err)
	}
	col := map[string]int{}
	for i, h := range head {
		h = strings.ToLower(strings.TrimSpace(h))
		if !containsStr(csvColumns, h) {
			return nil, nil, fmt.Errorf("%s:1: column %q: want rule, tenant, limit, weight or expires", file, h)
		}
		col[h] = i
	}
	if _, ok := col["rule"]; !ok {
		return nil, nil, fmt.Errorf("%s:1: the header has no rule column", file)
	}
	if _, ok := col["tenant"]; !ok {
		return nil, nil, fmt.Errorf("%s:1: the header has no tenant column", file)
	}
	var out []*allotpb.Override
	var lines []int
	seen := map[[2]string]int{}
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, lines, nil
		}
		line, _ := r.FieldPos(0)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %v", file, err)
		}
		get := func(name string) string {
			if i, ok := col[name]; ok && i < len(rec) {
				return strings.TrimSpace(rec[i])
			}
			return ""
		}
		var limit int64
		var weight float64
		if s := get("limit"); s != "" {
			if limit, err = strconv.ParseInt(s, 10, 64); err != nil {
				return nil, nil, fmt.Errorf("%s:%d: limit %q: not an integer", file, line, s)
			}
		}
		if s := get("weight"); s != "" {
			if weight, err = strconv.ParseFloat(s, 64); err != nil {
				return nil, nil, fmt.Errorf("%s:%d: weight %q: not a number", file, line, s)
			}
		}
		o, err := overrideFrom(get("rule"), get("tenant"), limit, weight, get("expires"), now)
		if err == nil {
			err = once(seen, o, line)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%s:%d: %v", file, line, err)
		}
		out = append(out, o)
		lines = append(lines, line)
	}
}

func containsStr(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// overrideFrom checks what a line can be checked for without the
// cluster's rules, and builds the override.
func overrideFrom(rule, tenant string, limit int64, weight float64, expires string, now time.Time) (*allotpb.Override, error) {
	switch {
	case rule == "":
		return nil, errors.New("rule: missing")
	case tenant == "":
		return nil, errors.New("tenant: missing")
	case limit < 0:
		return nil, fmt.Errorf("limit: must not be negative, got %d", limit)
	case weight < 0:
		return nil, fmt.Errorf("weight: must not be negative, got %g", weight)
	case limit == 0 && weight == 0:
		return nil, errors.New("limit: an override sets a limit, a weight or both")
	}
	o := &allotpb.Override{Rule: rule, Tenant: tenant, Limit: limit, Weight: weight}
	if expires != "" {
		t, err := time.Parse(time.RFC3339, expires)
		if err != nil {
			return nil, fmt.Errorf("expires %q: want an RFC 3339 time", expires)
		}
		if !t.After(now) {
			return nil, fmt.Errorf("expires %s: not in the future", expires)
		}
		o.ExpiresUnixNano = t.UnixNano()
	}
	return o, nil
}

func once(seen map[[2]string]int, o *allotpb.Override, line int) error {
	k := [2]string{o.GetRule(), o.GetTenant()}
	if first, dup := seen[k]; dup {
		return fmt.Errorf("tenant %q under rule %q is also on line %d", o.GetTenant(), o.GetRule(), first)
	}
	seen[k] = line
	return nil
}
