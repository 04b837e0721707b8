package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/allot-io/allot/internal/plural"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/proto/rulespb"
	"github.com/allot-io/allot/rules"
	"google.golang.org/grpc"
)

func overridesCommand() *Command {
	return &Command{
		Name:  "overrides",
		Short: "set, list and delete per-tenant overrides of rules",
		Long: `
Reads and changes per-tenant overrides: one rule's limit and/or weight for
one tenant, kept by the cluster apart from the rules, so that a change
reaches every agent within a report interval without the rule set being
sent again. An override wins over the rules file's tenants section, which
wins over the tenant's plan (docs/rules.md#overrides).`,
		Notes: "Changes need an admin credential when the cluster has credentials.",
		Commands: []*Command{
			{
				Name: "put", Args: "RULE TENANT", Usage: "RULE TENANT [--limit N] [--weight W] [--expires WHEN] [flags]",
				Short: "set an override (--limit N, --weight W, --expires WHEN)",
				Long:  overridesPutAbout, Flags: overridesPutFlags,
			},
			{
				Name: "get", Args: "RULE TENANT", Usage: "RULE TENANT [--format table|jsonl|csv] [flags]",
				Short: "print one override (--format, as list)",
				Long:  overridesGetAbout, Flags: overridesGetFlags,
			},
			{
				Name: "list", Usage: "[--rule R] [--prefix P] [--format table|jsonl|csv] [flags]",
				Short: "print overrides (--rule R, --prefix P), paged through",
				Long:  overridesListAbout, Flags: overridesListFlags,
			},
			{
				Name: "delete", Args: "RULE TENANT",
				Short: "delete one override",
				Long:  "Deletes RULE's override for TENANT: the tenant's limit is the rules file's again. An override that does not exist is an error.",
				Flags: overridesDeleteFlags,
			},
			{
				Name: "import", Args: "FILE", Usage: "FILE [--format csv|jsonl] [flags]",
				Short: "set many, from CSV or JSON lines, all or none; what list --format csv|jsonl prints imports as a no-op",
				Long:  overridesImportAbout, Flags: overridesImportFlags,
			},
		},
	}
}

// overrideJSON is an override as the CLI prints and imports it.
type overrideJSON struct {
	Rule   string  `json:"rule"`
	Tenant string  `json:"tenant"`
	Limit  int64   `json:"limit,omitempty"`
	Weight float64 `json:"weight,omitempty"`
	// AnchorDay and TimeZone anchor the tenant's cycles on a rule
	// counted on the calendar (period: month).
	AnchorDay int    `json:"anchor_day,omitempty"`
	TimeZone  string `json:"time_zone,omitempty"`
	Expires   string `json:"expires,omitempty"` // RFC 3339
	Version   uint64 `json:"version,omitempty"`
	Updated   string `json:"updated,omitempty"`
}

func overrideOut(o *allotpb.Override) overrideJSON {
	j := overrideJSON{Rule: o.GetRule(), Tenant: o.GetTenant(), Limit: o.GetLimit(), Weight: o.GetWeight(), Version: o.GetVersion(),
		AnchorDay: int(o.GetCycle().GetAnchorDay()), TimeZone: o.GetCycle().GetTimeZone()}
	if ns := o.GetExpiresUnixNano(); ns != 0 {
		// To the nanosecond, as the cluster holds it: an expiry
		// exported and imported again is the same expiry.
		j.Expires = time.Unix(0, ns).UTC().Format(time.RFC3339Nano)
	}
	if ns := o.GetUpdatedUnixNano(); ns != 0 {
		j.Updated = time.Unix(0, ns).UTC().Format(time.RFC3339Nano)
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
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("%q: want an RFC 3339 time (2026-12-24T00:00:00Z) or a duration from now (72h)", s)
	}
	return t.UnixNano(), nil
}

const overridesPutAbout = `
Sets RULE's override for TENANT: --limit replaces the rule's limit (per
the rule's period), --weight the tenant's weight under a global rule,
--anchor-day and --time-zone where the tenant's cycles start on a rule
counted on the calendar (period: month; the day the customer signed up);
at least one. --expires ends it at a time (RFC 3339) or after a duration
(72h): a temporary raise for an event. The cluster checks it against its
rules (an unknown rule, a negative limit or an expiry in the past is
refused, naming the field) and prints the new overrides version; an
override put again as it is changes nothing and keeps the version.`

func overridesPutFlags(f *flags) runFunc {
	cmd := f.cmd
	cf := f.client()
	var limit int64
	var weight float64
	var expires string
	f.Int64Var(&limit, "limit", 0, "the tenant's limit per the rule's period")
	f.Float64Var(&weight, "weight", 0, "the tenant's weight under a global rule")
	var anchorDay int
	var timeZone string
	f.IntVar(&anchorDay, "anchor-day", 0, "the day of the month the tenant's cycles start, 1–31 (a rule with period: month)")
	f.StringVar(&timeZone, "time-zone", "", "the IANA time zone whose midnights start the tenant's cycles (a calendar rule)")
	f.StringVar(&expires, "expires", "", "when the override ends: an RFC 3339 time or a duration from now")
	return func(ctx context.Context, e *env, args []string) error {
		if len(args) != 2 {
			return usagef(cmd, "want RULE and TENANT, got %s", plural.Count(len(args), "argument"))
		}
		if limit == 0 && weight == 0 && anchorDay == 0 && timeZone == "" {
			return usagef(cmd, "give --limit, --weight, --anchor-day or --time-zone: an override sets the tenant's limit, its weight, where its cycles start, or more")
		}
		at, err := parseExpiry(expires, time.Now())
		if err != nil {
			return usagef(cmd, "--expires %v", err)
		}
		o := &allotpb.Override{Rule: args[0], Tenant: args[1], Limit: limit, Weight: weight, ExpiresUnixNano: at,
			Cycle: rulespb.AnchorToProto(rules.Anchor{AnchorDay: anchorDay, TimeZone: timeZone})}
		resp, err := putOverrides(ctx, cf, []*allotpb.Override{o}, false)
		if err != nil {
			return err
		}
		if resp.GetCount() == 0 {
			fmt.Fprintf(e.stdout, "overrides version %d kept: %s/%s is already so; nothing changed\n", resp.GetVersion(), o.Rule, o.Tenant)
			return nil
		}
		fmt.Fprintf(e.stdout, "overrides version %d: %s/%s set\n", resp.GetVersion(), o.Rule, o.Tenant)
		return nil
	}
}

func putOverrides(ctx context.Context, cf *clientFlags, list []*allotpb.Override, validateOnly bool) (*allotpb.PutOverridesResponse, error) {
	resp, err := sendOverrides(ctx, cf, list, validateOnly)
	if errors.Is(err, errRejected) {
		return nil, &usageError{err: fmt.Errorf("the cluster refused the overrides: %w", err)}
	}
	return resp, err
}

// sendOverrides is one PutOverrides call; a refusal wraps errRejected.
func sendOverrides(ctx context.Context, cf *clientFlags, list []*allotpb.Override, validateOnly bool) (*allotpb.PutOverridesResponse, error) {
	cl, err := cf.connect()
	if err != nil {
		return nil, err
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

const overridesGetAbout = `
Prints RULE's override for TENANT, from the member called, as 'overrides
list' prints overrides: --format table (the default), jsonl or csv.`

func overridesGetFlags(f *flags) runFunc {
	cmd := f.cmd
	cf := f.client()
	var format string
	registerOverrideFormat(f, &format)
	return func(ctx context.Context, e *env, args []string) error {
		if len(args) != 2 {
			return usagef(cmd, "want RULE and TENANT, got %s", plural.Count(len(args), "argument"))
		}
		if err := checkOverrideFormat(cmd, format); err != nil {
			return err
		}
		cl, err := cf.connect()
		if err != nil {
			return err
		}
		defer cl.Close()
		var o *allotpb.Override
		err = cf.once(ctx, cl, func(ctx context.Context, cc *grpc.ClientConn) error {
			var err error
			o, err = allotpb.NewOverridesServiceClient(cc).GetOverride(ctx, &allotpb.GetOverrideRequest{Rule: args[0], Tenant: args[1]})
			return err
		})
		if err != nil {
			return err
		}
		out := newOverrideWriter(e.stdout, format)
		out.write(overrideOut(o))
		return out.flush()
	}
}

// registerOverrideFormat adds --format, the same for get and list.
func registerOverrideFormat(f *flags, format *string) {
	f.StringVar(format, "format", "table", "output format: table, jsonl or csv (what 'overrides import' reads)")
}

func checkOverrideFormat(cmd, format string) error {
	if format != "table" && format != "jsonl" && format != "csv" {
		return usagef(cmd, "--format %q: want table, jsonl or csv", format)
	}
	return nil
}

const overridesListAbout = `
Prints the cluster's overrides by rule and tenant, every page of them:
--rule and --prefix narrow the list. --format table (the default), jsonl
(one JSON object per line, what 'overrides import' reads) or csv (the
same), as 'overrides get' prints one. The total and the overrides version
go to stderr.`

func overridesListFlags(f *flags) runFunc {
	cmd := f.cmd
	cf := f.client()
	var rule, prefix, format string
	f.StringVar(&rule, "rule", "", "list this rule's overrides only")
	f.StringVar(&prefix, "prefix", "", "list tenants with this prefix only")
	registerOverrideFormat(f, &format)
	return func(ctx context.Context, e *env, args []string) error {
		if err := checkOverrideFormat(cmd, format); err != nil {
			return err
		}
		cl, err := cf.connect()
		if err != nil {
			return err
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
		fmt.Fprintln(ow.tw, "RULE\tTENANT\tLIMIT\tWEIGHT\tCYCLE\tEXPIRES\tVERSION")
	case "csv":
		ow.cw = csv.NewWriter(w)
		_ = ow.cw.Write(csvColumns)
	default:
		ow.enc = json.NewEncoder(w)
	}
	return ow
}

var csvColumns = []string{"rule", "tenant", "limit", "weight", "anchor_day", "time_zone", "expires"}

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
		fmt.Fprintf(ow.tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\n", o.Rule, o.Tenant, orDash(num(o.Limit)), orDash(flt(o.Weight)), orDash(o.cycle()), orDash(o.Expires), o.Version)
	case "csv":
		_ = ow.cw.Write([]string{o.Rule, o.Tenant, num(o.Limit), flt(o.Weight), num(int64(o.AnchorDay)), o.TimeZone, o.Expires})
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

func overridesDeleteFlags(f *flags) runFunc {
	cf := f.client()
	return func(ctx context.Context, e *env, args []string) error {
		if len(args) != 2 {
			return usagef(f.cmd, "want RULE and TENANT, got %s", plural.Count(len(args), "argument"))
		}
		cl, err := cf.connect()
		if err != nil {
			return err
		}
		defer cl.Close()
		return cf.once(ctx, cl, func(ctx context.Context, cc *grpc.ClientConn) error {
			resp, err := allotpb.NewOverridesServiceClient(cc).DeleteOverrides(ctx, &allotpb.DeleteOverridesRequest{Keys: []*allotpb.OverrideKey{{Rule: args[0], Tenant: args[1]}}})
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "overrides version %d: %s/%s deleted\n", resp.GetVersion(), args[0], args[1])
			return nil
		})
	}
}

// cycle is where the override starts the tenant's cycles, as the table
// prints it: "day 17 America/New_York"; empty for none.
func (o overrideJSON) cycle() string {
	var parts []string
	if o.AnchorDay != 0 {
		parts = append(parts, "day "+strconv.Itoa(o.AnchorDay))
	}
	if o.TimeZone != "" {
		parts = append(parts, o.TimeZone)
	}
	return strings.Join(parts, " ")
}
