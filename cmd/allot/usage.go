package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/allot-io/allot/billing"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/proto/ledgerpb"
	"github.com/allot-io/allot/rules"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"
)

const usageAbout = `
Exports reconciled usage from the replicated ledger, for billing: what
each tenant was admitted and denied under each rule, in each region and
billing window whose start is in [--from, --to).

Give --coordinator once per region's cluster; inside one, list members of
the same cluster separated by commas (any member answers). In
ALLOT_COORDINATOR or --config, separate clusters with ';'. Ledgers of
several regions are merged into one bill: one line per tenant, rule,
window and region, and where more than one region contributed, a total
line (region *) giving each region's share of what was admitted and the
total against the rule's global allowance.

The allowance is the rule's limit × window ÷ period (a tenant override's
limit when there is one), times the region's fraction on region lines of a
rule divided among regions. It is left blank where the ledger cannot tell
it: for local rules, rules keyed finer than the tenant (user, route, ip),
and limits set by plans, which the ledger does not record.

Each line also shows the terms the ledger recorded as the usage was
counted: the start of the tenant's cycle of the rule that the window
belongs to (cycle_start) and the limit in force for the tenant (limit),
blank for rules not keyed by the tenant alone and for what a plan sets;
and, under a quota with overage, the part of admitted past that limit
(overage), which billing prices apart: admitted − overage is what the
plan included.

A window is final once it has closed and every agent reporting in it has
been heard from past its end: final counts never change again.

On a region split into shard groups, the home group answers for every
group; --group-only asks the groups named for their own part of the
ledger alone (a group that is not home answers only so), to see what one
group holds: it is not the region's bill.

Times are RFC 3339 (2026-11-29T10:00:00Z), a date (2026-11-29, UTC
midnight), a duration before now (24h, 90m, 7d) or now.`

func usageCommand() *Command {
	return &Command{
		Name: "usage", Usage: "--coordinator ADDR[,ADDR...] [--coordinator ...] --from T [--to T] [flags]",
		Short: "export reconciled usage for billing",
		Long:  usageAbout, Flags: usageExportFlags,
	}
}

func usageExportFlags(f *flags) runFunc {
	cmd := f.cmd
	var (
		uf                                   usageFlags
		from, to, tenant, region, rule, form string
		groupOnly                            bool
	)
	uf.register(f)
	f.StringVar(&from, "from", "", "first billing window start to include (required)")
	f.StringVar(&to, "to", "now", "billing windows starting at or after this are left out")
	f.StringVar(&tenant, "tenant", "", "only this tenant")
	f.StringVar(&region, "region", "", "only this region")
	f.StringVar(&rule, "rule", "", "only this rule")
	f.StringVar(&form, "format", "table", "output format: table, csv or jsonl")
	f.BoolVar(&groupOnly, "group-only", false, "on a split region, each shard group's own part of the ledger alone, not the region's")
	return func(ctx context.Context, e *env, args []string) error {
		if form != "table" && form != "csv" && form != "jsonl" {
			return usagef(cmd, "--format %q: want table, csv or jsonl", form)
		}
		if from == "" {
			return usagef(cmd, "--from is required")
		}
		now := time.Now()
		start, err := parseTime(from, now)
		if err != nil {
			return usagef(cmd, "--from: %v", err)
		}
		end, err := parseTime(to, now)
		if err != nil {
			return usagef(cmd, "--to: %v", err)
		}
		if !start.Before(end) {
			return usagef(cmd, "--from %s is not before --to %s", start.Format(time.RFC3339), end.Format(time.RFC3339))
		}
		q := &allotpb.UsageQuery{From: timestamppb.New(start), To: timestamppb.New(end), Tenant: tenant, Rule: rule, Region: region, GroupOnly: groupOnly}
		var lines []billing.LedgerLine
		for i, addrs := range uf.clusters.lists {
			got, err := fetchLedger(ctx, uf.client(addrs), q, i)
			if err != nil {
				return fmt.Errorf("--coordinator %s: %w", strings.Join(addrs, ","), err)
			}
			lines = append(lines, got...)
		}
		bill, err := billing.Merge(lines)
		if err != nil {
			return &usageError{err: mergeError(err), hint: cmd}
		}
		switch form {
		case "csv":
			return billing.WriteCSV(e.stdout, bill)
		case "jsonl":
			return billing.WriteJSONL(e.stdout, bill)
		}
		return billing.WriteTable(e.stdout, bill, start, end)
	}
}

// mergeError says which --coordinator flags counted a line twice, and
// what to do about it.
func mergeError(err error) error {
	var twice *billing.CountedTwiceError
	if !errors.As(err, &twice) {
		return err
	}
	a, b := twice.Lines[0], twice.Lines[1]
	return fmt.Errorf("tenant %s, rule %s, region %s, window %s was counted by two clusters (--coordinator #%d and #%d): give each region's cluster once",
		a.Tenant, a.Rule, a.Region, a.Start().Format(time.RFC3339), a.Source+1, b.Source+1)
}

// usageFlags are usage's connection flags: those of clientFlags, except
// that --coordinator may be repeated, once per region's cluster.
type usageFlags struct {
	clusters clusterList
	cf       clientFlags
}

// register adds --coordinator as a repeatable flag and the other client
// flags as they are.
func (u *usageFlags) register(f *flags) {
	u.clusters = clusterList{lists: [][]string{{"127.0.0.1:7400"}}, dflt: true}
	f.Var(&u.clusters, "coordinator", "gRPC addresses of one region's cluster, comma-separated; repeat for each region")
	u.cf.registerAccess(f)
}

// client is the client flags for one cluster.
func (u *usageFlags) client(addrs []string) *clientFlags {
	cf := u.cf
	cf.coordinators = strings.Join(addrs, ",")
	return &cf
}

// clusterList is a repeatable flag: each value is one cluster's members,
// comma-separated. A value may also hold several clusters separated by
// ';', which is how the environment and config files, which give a flag
// once, name more than one.
type clusterList struct {
	lists [][]string
	dflt  bool // lists holds the default, which the first value replaces
}

func (c *clusterList) String() string {
	if c == nil {
		return ""
	}
	parts := make([]string, len(c.lists))
	for i, l := range c.lists {
		parts[i] = strings.Join(l, ",")
	}
	return strings.Join(parts, ";")
}

func (c *clusterList) Set(v string) error {
	if c.dflt {
		c.lists, c.dflt = nil, false
	}
	for _, part := range strings.Split(v, ";") {
		addrs := splitList(part)
		if len(addrs) == 0 {
			return fmt.Errorf("%q names no address", v)
		}
		c.lists = append(c.lists, addrs)
	}
	return nil
}

// parseTime reads a --from or --to time: RFC 3339, a date (midnight UTC),
// a duration before now, or "now".
func parseTime(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "now" {
		return now, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	d, err := parseAgo(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q: want an RFC 3339 time (2026-11-29T10:00:00Z), a date (2026-11-29), a duration before now (24h, 7d) or now", s)
	}
	if d < 0 {
		return time.Time{}, fmt.Errorf("%q: a duration means that long before now, so it must not be negative", s)
	}
	return now.Add(-d), nil
}

// parseAgo parses a Go duration, or a whole number of days such as 7d,
// which billing periods are counted in and Go durations lack.
func parseAgo(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 32)
		if err != nil {
			return 0, err
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}

// maxPages bounds the pages read from one cluster, so that a cluster that
// keeps answering with a next page cannot make the export run forever.
const maxPages = 100_000

// fetchLedger reads every ledger record q matches from one cluster,
// page by page, and the cluster's rules to resolve them against. source
// is the cluster's place among the --coordinator flags, from 0.
func fetchLedger(ctx context.Context, cf *clientFlags, q *allotpb.UsageQuery, source int) ([]billing.LedgerLine, error) {
	cl, err := cf.connect()
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	set, err := listRules(ctx, cf, cl)
	if err != nil {
		return nil, err
	}
	list, err := fromCluster(set.GetRules())
	if err != nil {
		return nil, err
	}
	defs := make(map[string]*rules.Rule, len(list))
	for i := range list {
		defs[list[i].Name] = &list[i]
	}
	var out []billing.LedgerLine
	page := &allotpb.UsageQuery{From: q.From, To: q.To, Tenant: q.Tenant, Rule: q.Rule, Region: q.Region, GroupOnly: q.GroupOnly, PageSize: 5000}
	for n := 0; ; n++ {
		if n == maxPages {
			return nil, fmt.Errorf("reading usage: more than %d pages", maxPages)
		}
		var resp *allotpb.UsageResponse
		// Each page gets its own --timeout: a long export is many calls.
		err := cf.once(ctx, cl, func(ctx context.Context, cc *grpc.ClientConn) error {
			var err error
			resp, err = allotpb.NewUsageServiceClient(cc).QueryUsage(ctx, page)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("reading usage: %w", usageCallError(err))
		}
		for _, r := range resp.GetRecords() {
			out = append(out, billing.LedgerLine{Line: ledgerpb.FromProto(r), Source: source, Def: defs[r.GetRule()]})
		}
		next := resp.GetNextPageToken()
		if next == "" {
			return out, nil
		}
		if next == page.PageToken {
			return nil, fmt.Errorf("reading usage: the cluster returned the same page twice")
		}
		page.PageToken = next
	}
}

// usageCallError is what a failed usage page says: when the cluster
// answered that its ledger sink could not be read, the cause and the
// windows it can still answer, as the --from that reads them.
func usageCallError(err error) error {
	reason, md := allotErrorInfo(err)
	if reason != allotpb.ReasonLedgerSinkUnavailable {
		return err
	}
	state := "could not be read (" + md["cause"] + ")"
	if md["cause"] == "unreachable" {
		state = "is unreachable"
	}
	return fmt.Errorf("the ledger sink %s; windows up to %s were exported to it, and windows from %s on are still in memory: narrow --from to %s, or bring the sink back (%s)",
		state, md["exported_through"], md["in_memory_from"], md["in_memory_from"], md["error"])
}
