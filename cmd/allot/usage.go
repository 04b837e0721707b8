package main

import (
	"cmp"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	allotpb "github.com/allot-io/allot/proto"
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

A window is final once it has closed and every agent reporting in it has
been heard from past its end: final counts never change again.

Times are RFC 3339 (2026-11-29T10:00:00Z), a date (2026-11-29, UTC
midnight), a duration before now (24h, 90m, 7d) or now.`

func runUsage(ctx context.Context, e *env) error {
	const cmd = "usage"
	f := newFlags(e, cmd, "--coordinator ADDR[,ADDR...] [--coordinator ...] --from T [--to T] [flags]", usageAbout)
	var (
		uf                                   usageFlags
		from, to, tenant, region, rule, form string
	)
	uf.register(f)
	f.StringVar(&from, "from", "", "first billing window start to include (required)")
	f.StringVar(&to, "to", "now", "billing windows starting at or after this are left out")
	f.StringVar(&tenant, "tenant", "", "only this tenant")
	f.StringVar(&region, "region", "", "only this region")
	f.StringVar(&rule, "rule", "", "only this rule")
	f.StringVar(&form, "format", "table", "output format: table, csv or jsonl")
	if err := f.parse(e); err != nil {
		return err
	}
	if err := f.noArgs(); err != nil {
		return err
	}
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
	q := &allotpb.UsageQuery{From: timestamppb.New(start), To: timestamppb.New(end), Tenant: tenant, Rule: rule, Region: region}
	var lines []ledgerLine
	for i, addrs := range uf.clusters.lists {
		got, err := fetchLedger(ctx, uf.client(addrs), q, i)
		if err != nil {
			return fmt.Errorf("--coordinator %s: %w", strings.Join(addrs, ","), err)
		}
		lines = append(lines, got...)
	}
	bill, err := mergeBill(lines)
	if err != nil {
		return &usageError{err: err, hint: cmd}
	}
	switch form {
	case "csv":
		return writeBillCSV(e.stdout, bill)
	case "jsonl":
		return writeBillJSONL(e.stdout, bill)
	}
	return writeBillTable(e.stdout, bill, start, end)
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

// ledgerLine is one record of one cluster's ledger, with the rule it was
// counted under as that cluster knows it.
type ledgerLine struct {
	start, end           time.Time
	tenant, rule, region string
	admitted, denied     uint64
	final                bool
	granted              *float64      // what the parent leased the region (docs/regions.md), if recorded
	source               int           // which --coordinator it came from
	def                  *allotpb.Rule // nil when the cluster no longer has the rule
}

// maxPages bounds the pages read from one cluster, so that a cluster that
// keeps answering with a next page cannot make the export run forever.
const maxPages = 100_000

// fetchLedger reads every ledger record q matches from one cluster,
// page by page, and the cluster's rules to resolve them against.
func fetchLedger(ctx context.Context, cf *clientFlags, q *allotpb.UsageQuery, source int) ([]ledgerLine, error) {
	cl, err := cf.dial()
	if err != nil {
		return nil, &usageError{err: err, hint: "usage"}
	}
	defer cl.Close()
	set, err := listRules(ctx, cf, cl)
	if err != nil {
		return nil, err
	}
	defs := map[string]*allotpb.Rule{}
	for _, r := range set.GetRules() {
		defs[r.GetName()] = r
	}
	var out []ledgerLine
	page := &allotpb.UsageQuery{From: q.From, To: q.To, Tenant: q.Tenant, Rule: q.Rule, Region: q.Region, PageSize: 5000}
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
			return nil, fmt.Errorf("reading usage: %w", err)
		}
		for _, r := range resp.GetRecords() {
			out = append(out, ledgerLine{
				start: r.GetWindowStart().AsTime(), end: r.GetWindowEnd().AsTime(),
				tenant: r.GetTenant(), rule: r.GetRule(), region: r.GetRegion(),
				admitted: r.GetAdmitted(), denied: r.GetDenied(), final: r.GetFinal(), granted: r.Granted,
				source: source, def: defs[r.GetRule()],
			})
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

// billLine is one line of the merged bill: one region's usage, or the
// total over the regions (Total, Region "*").
type billLine struct {
	Start, End   time.Time
	Final        bool
	Tenant, Rule string
	Region       string
	Total        bool
	Admitted     uint64
	Denied       uint64
	// Share is a region's part of what its tenant, rule and window
	// admitted over all regions; nil with one region or nothing admitted.
	Share *big.Rat
	// Shares lists every region's share, on a total line.
	Shares []regionShare
	// Fraction is the rule's fraction for the region ("" if the rule does
	// not divide by region); Allowance what the line was allowed (nil when
	// unknown).
	Fraction  string
	Allowance *big.Rat
	// Granted is, for a region leasing from a parent, the units of the
	// allowance the parent leased it over the window; on a total line,
	// their sum. Nil when none was recorded.
	Granted *float64
}

type regionShare struct {
	Region string
	Share  *big.Rat
}

// allRegions is the region of a total line.
const allRegions = "*"

// mergeBill merges the ledgers of several clusters into one bill, sorted
// by window, tenant, rule and region, with a total line after the regions
// of each tenant, rule and window that more than one region contributed
// to. A line counted by two clusters is an error: adding both would bill
// it twice.
func mergeBill(lines []ledgerLine) ([]billLine, error) {
	lines = slices.Clone(lines)
	slices.SortFunc(lines, func(a, b ledgerLine) int {
		return cmp.Or(a.start.Compare(b.start), a.end.Compare(b.end), cmp.Compare(a.tenant, b.tenant),
			cmp.Compare(a.rule, b.rule), cmp.Compare(a.region, b.region), cmp.Compare(a.source, b.source))
	})
	var bill []billLine
	for i := 0; i < len(lines); {
		j := i + 1
		for j < len(lines) && sameGroup(lines[i], lines[j]) {
			j++
		}
		group := lines[i:j]
		for k := 1; k < len(group); k++ {
			if a, b := group[k-1], group[k]; a.region == b.region {
				return nil, fmt.Errorf("tenant %s, rule %s, region %s, window %s was counted by two clusters (--coordinator #%d and #%d): give each region's cluster once",
					a.tenant, a.rule, a.region, a.start.UTC().Format(time.RFC3339), a.source+1, b.source+1)
			}
		}
		bill = append(bill, billGroup(group)...)
		i = j
	}
	return bill, nil
}

func sameGroup(a, b ledgerLine) bool {
	return a.start.Equal(b.start) && a.end.Equal(b.end) && a.tenant == b.tenant && a.rule == b.rule
}

// billGroup bills one tenant, rule and window: a line per region, and a
// total when there are several.
func billGroup(group []ledgerLine) []billLine {
	var admitted, denied uint64
	final := true
	var def *allotpb.Rule
	for _, l := range group {
		admitted += l.admitted
		denied += l.denied
		final = final && l.final
		if def == nil {
			def = l.def // the first cluster, in flag order, that knows the rule
		}
	}
	multi := len(group) > 1
	out := make([]billLine, 0, len(group)+1)
	var granted *float64
	var shares []regionShare
	for _, l := range group {
		b := billLine{Start: l.start, End: l.end, Final: l.final, Tenant: l.tenant, Rule: l.rule, Region: l.region,
			Admitted: l.admitted, Denied: l.denied, Granted: l.granted}
		if l.granted != nil {
			sum := *l.granted
			if granted != nil {
				sum += *granted
			}
			granted = &sum
		}
		whole := allowance(l.def, l.tenant, l.end.Sub(l.start))
		b.Fraction, b.Allowance = regionPart(l.def, l.region, whole)
		if multi && admitted > 0 {
			b.Share = new(big.Rat).SetFrac(new(big.Int).SetUint64(l.admitted), new(big.Int).SetUint64(admitted))
			shares = append(shares, regionShare{l.region, b.Share})
		}
		out = append(out, b)
	}
	if multi {
		first := group[0]
		out = append(out, billLine{Start: first.start, End: first.end, Final: final, Tenant: first.tenant, Rule: first.rule,
			Region: allRegions, Total: true, Admitted: admitted, Denied: denied, Shares: shares,
			Allowance: allowance(def, first.tenant, first.end.Sub(first.start)), Granted: granted})
	}
	return out
}

// allowance is what rule r allows tenant over a window of width w, in all
// regions together: its limit × w ÷ period, exactly. It is nil when the
// ledger cannot tell: a local rule is enforced by each node alone; a rule
// keyed finer than the tenant limits each user, route or address, not
// the tenant's total; and a plan's limit depends on the tenant's plan,
// which the ledger does not record.
func allowance(r *allotpb.Rule, tenant string, w time.Duration) *big.Rat {
	period := r.GetPeriod().AsDuration()
	if r == nil || r.GetLocal() || period <= 0 || w <= 0 || !perTenant(r) {
		return nil
	}
	limit := r.GetLimit()
	if o := r.GetTenants()[tenant]; o.GetLimit() > 0 {
		limit = o.GetLimit()
	} else {
		for _, p := range r.GetPlans() {
			if p.GetLimit() > 0 {
				return nil
			}
		}
	}
	num := new(big.Int).Mul(big.NewInt(limit), big.NewInt(int64(w)))
	return new(big.Rat).SetFrac(num, big.NewInt(int64(period)))
}

// perTenant reports whether a rule's key is the tenant, or the whole
// service (global), so that a tenant's total is what the limit bounds.
func perTenant(r *allotpb.Rule) bool {
	key := r.GetKey()
	switch {
	case len(key) > 0:
		return len(key) == 1 && key[0] == "tenant"
	case r.GetScope() == "tenant", r.GetScope() == "global":
		return true
	}
	return false
}

// regionPart is a region's part of an allowance: the rule's fraction for
// the region, as written, and the allowance times it. A rule that does not
// divide by region lets each region's cluster enforce all of it.
func regionPart(r *allotpb.Rule, region string, whole *big.Rat) (string, *big.Rat) {
	if len(r.GetRegions()) == 0 {
		return "", whole
	}
	f := r.GetRegions()[region] // 0: this region has no part
	// The shortest decimal that reads back as f is what the rules file
	// said (0.6), where f's binary value is not.
	text := strconv.FormatFloat(f, 'g', -1, 64)
	if whole == nil {
		return text, nil
	}
	frac, ok := new(big.Rat).SetString(text)
	if !ok {
		return text, nil
	}
	return text, new(big.Rat).Mul(whole, frac)
}

// decimal writes r exactly when it is a whole number, else rounded to
// prec places, without trailing zeros.
func ratText(r *big.Rat, prec int) string {
	if r == nil {
		return ""
	}
	if r.IsInt() {
		return r.Num().String()
	}
	s := strings.TrimRight(r.FloatString(prec), "0")
	return strings.TrimSuffix(s, ".")
}

// ratio is a/b, or nil when b is nil or zero.
func usedRatio(a uint64, b *big.Rat) *big.Rat {
	if b == nil || b.Sign() == 0 {
		return nil
	}
	return new(big.Rat).Quo(new(big.Rat).SetInt(new(big.Int).SetUint64(a)), b)
}

func ratPercent(r *big.Rat) string {
	if r == nil {
		return ""
	}
	return new(big.Rat).Mul(r, big.NewRat(100, 1)).FloatString(2) + "%"
}

func finalText(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// sharesText lists a total line's region shares, "eu=0.6000;us=0.4000".
func sharesText(shares []regionShare, format func(*big.Rat) string, sep string) string {
	parts := make([]string, len(shares))
	for i, s := range shares {
		parts[i] = s.Region + "=" + format(s.Share)
	}
	return strings.Join(parts, sep)
}

func fraction4(r *big.Rat) string {
	if r == nil {
		return ""
	}
	return r.FloatString(4)
}

var billCSVHeader = []string{"window_start", "window_end", "final", "tenant", "rule", "region", "admitted", "denied", "share", "region_fraction", "allowance", "used", "granted"}

// grantedText is a granted count to three places, or "" when none.
func grantedText(g *float64) string {
	if g == nil {
		return ""
	}
	return strconv.FormatFloat(*g, 'f', 3, 64)
}

// writeBillCSV writes the bill with a header row. share is a region's part
// of the admitted total (0.6000), or on a total line every region's
// (eu=0.6000;us=0.4000); used is admitted ÷ allowance.
func writeBillCSV(w io.Writer, bill []billLine) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(billCSVHeader); err != nil {
		return err
	}
	for _, b := range bill {
		share := fraction4(b.Share)
		if b.Total {
			share = sharesText(b.Shares, fraction4, ";")
		}
		row := []string{b.Start.UTC().Format(time.RFC3339), b.End.UTC().Format(time.RFC3339), strconv.FormatBool(b.Final),
			b.Tenant, b.Rule, b.Region, strconv.FormatUint(b.Admitted, 10), strconv.FormatUint(b.Denied, 10),
			share, b.Fraction, ratText(b.Allowance, 3), fraction4(usedRatio(b.Admitted, b.Allowance)), grantedText(b.Granted)}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// billJSON is a bill line as JSON. Counts are integers; allowance is exact
// when whole and otherwise rounded to three places.
type billJSON struct {
	WindowStart    string             `json:"window_start"`
	WindowEnd      string             `json:"window_end"`
	Final          bool               `json:"final"`
	Tenant         string             `json:"tenant"`
	Rule           string             `json:"rule"`
	Region         string             `json:"region"`
	Total          bool               `json:"total"`
	Admitted       uint64             `json:"admitted"`
	Denied         uint64             `json:"denied"`
	Share          *json.Number       `json:"share,omitempty"`
	Shares         map[string]float64 `json:"shares,omitempty"`
	RegionFraction *json.Number       `json:"region_fraction,omitempty"`
	Allowance      *json.Number       `json:"allowance,omitempty"`
	Used           *json.Number       `json:"used,omitempty"`
	Granted        *json.Number       `json:"granted,omitempty"`
}

func jsonNumber(s string) *json.Number {
	if s == "" {
		return nil
	}
	n := json.Number(s)
	return &n
}

// writeBillJSONL writes one JSON object per bill line.
func writeBillJSONL(w io.Writer, bill []billLine) error {
	enc := json.NewEncoder(w)
	for _, b := range bill {
		j := billJSON{WindowStart: b.Start.UTC().Format(time.RFC3339), WindowEnd: b.End.UTC().Format(time.RFC3339), Final: b.Final,
			Tenant: b.Tenant, Rule: b.Rule, Region: b.Region, Total: b.Total, Admitted: b.Admitted, Denied: b.Denied,
			Share: jsonNumber(ratText(b.Share, 6)), RegionFraction: jsonNumber(b.Fraction),
			Allowance: jsonNumber(ratText(b.Allowance, 3)), Used: jsonNumber(ratText(usedRatio(b.Admitted, b.Allowance), 6)),
			Granted: jsonNumber(grantedText(b.Granted))}
		if b.Total {
			j.Shares = make(map[string]float64, len(b.Shares))
			for _, s := range b.Shares {
				j.Shares[s.Region], _ = s.Share.Float64()
			}
		}
		if err := enc.Encode(j); err != nil {
			return err
		}
	}
	return nil
}

// writeBillTable writes the bill for people: percentages, and a note on
// windows that may still change.
func writeBillTable(w io.Writer, bill []billLine, from, to time.Time) error {
	if len(bill) == 0 {
		_, err := fmt.Fprintf(w, "no usage in billing windows starting from %s to %s\n", from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339))
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WINDOW\tFINAL\tTENANT\tRULE\tREGION\tADMITTED\tDENIED\tSHARE\tFRACTION\tALLOWANCE\tUSED\tGRANTED")
	open := 0
	for _, b := range bill {
		share := ratPercent(b.Share)
		if b.Total {
			share = sharesText(b.Shares, ratPercent, " ")
		}
		if !b.Final && !b.Total {
			open++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", b.Start.UTC().Format(time.RFC3339), finalText(b.Final),
			b.Tenant, b.Rule, b.Region, b.Admitted, b.Denied, share, b.Fraction, ratText(b.Allowance, 3), ratPercent(usedRatio(b.Admitted, b.Allowance)), grantedText(b.Granted))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if open > 0 {
		fmt.Fprintf(w, "\n%s in windows not yet final: their counts may still grow.\n", nounCount(open, "line"))
	}
	return nil
}
