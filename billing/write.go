package billing

import (
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

	"github.com/allot-io/allot/ledger"
)

// ratText writes r exactly when it is a whole number, else rounded to
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

// usedRatio is a/b, or nil when b is nil or zero.
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
func sharesText(shares []RegionShare, format func(*big.Rat) string, sep string) string {
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

// CSVHeader is the header row of WriteCSV, naming its columns.
func CSVHeader() []string { return slices.Clone(csvHeader) }

var csvHeader = []string{"window_start", "window_end", "final", "tenant", "rule", "region", "admitted", "denied", "share", "region_fraction", "allowance", "used", "granted",
	"cycle_start", "limit", "overage"}

// grantedText is a granted count to three places, or "" when none.
func grantedText(g *float64) string {
	if g == nil {
		return ""
	}
	return strconv.FormatFloat(*g, 'f', 3, 64)
}

// cycleText is a line's cycle start, RFC 3339 in UTC, or "" when none
// was recorded.
func cycleText(t ledger.Terms) string {
	start, ok := t.Cycle()
	if !ok {
		return ""
	}
	return start.Format(time.RFC3339)
}

// limitText is a line's limit in force, or "" when none was recorded.
func limitText(t ledger.Terms) string {
	if t.Limit == 0 {
		return ""
	}
	return strconv.FormatInt(t.Limit, 10)
}

// WriteCSV writes the bill with a header row. share is a region's part
// of the admitted total (0.6000), or on a total line every region's
// (eu=0.6000;us=0.4000); used is admitted ÷ allowance.
func WriteCSV(w io.Writer, bill []Line) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader); err != nil {
		return err
	}
	for _, b := range bill {
		share := fraction4(b.Share)
		if b.Total {
			share = sharesText(b.Shares, fraction4, ";")
		}
		row := []string{b.Start.UTC().Format(time.RFC3339), b.End.UTC().Format(time.RFC3339), strconv.FormatBool(b.Final),
			b.Tenant, b.Rule, b.Region, strconv.FormatUint(b.Admitted, 10), strconv.FormatUint(b.Denied, 10),
			share, b.Fraction, ratText(b.Allowance, 3), fraction4(usedRatio(b.Admitted, b.Allowance)), grantedText(b.Granted),
			cycleText(b.Terms), limitText(b.Terms), strconv.FormatUint(b.Overage, 10)}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// JSONLine is a bill line as JSON, one a line of WriteJSONL's output
// (`allot usage --format jsonl`), and what a program reading that output
// decodes it into. Counts are integers; allowance is exact when whole and
// otherwise rounded to three places.
type JSONLine struct {
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
	// CycleStart and Limit are the terms the ledger recorded: absent
	// when it recorded none.
	CycleStart string `json:"cycle_start,omitempty"`
	Limit      *int64 `json:"limit,omitempty"`
	// Overage is the part of Admitted past the limit in force.
	Overage uint64 `json:"overage"`
}

func jsonNumber(s string) *json.Number {
	if s == "" {
		return nil
	}
	n := json.Number(s)
	return &n
}

// WriteJSONL writes one JSON object per bill line.
func WriteJSONL(w io.Writer, bill []Line) error {
	enc := json.NewEncoder(w)
	for _, b := range bill {
		j := JSONLine{WindowStart: b.Start.UTC().Format(time.RFC3339), WindowEnd: b.End.UTC().Format(time.RFC3339), Final: b.Final,
			Tenant: b.Tenant, Rule: b.Rule, Region: b.Region, Total: b.Total, Admitted: b.Admitted, Denied: b.Denied,
			Share: jsonNumber(ratText(b.Share, 6)), RegionFraction: jsonNumber(b.Fraction),
			Allowance: jsonNumber(ratText(b.Allowance, 3)), Used: jsonNumber(ratText(usedRatio(b.Admitted, b.Allowance), 6)),
			Granted: jsonNumber(grantedText(b.Granted)), CycleStart: cycleText(b.Terms), Overage: b.Overage}
		if b.Terms.Limit != 0 {
			j.Limit = &b.Terms.Limit
		}
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

// WriteTable writes the bill for people: percentages, and a note on
// windows that may still change. from and to are the windows asked for,
// which an empty bill names.
func WriteTable(w io.Writer, bill []Line, from, to time.Time) error {
	if len(bill) == 0 {
		_, err := fmt.Fprintf(w, "no usage in billing windows starting from %s to %s\n", from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339))
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WINDOW\tFINAL\tTENANT\tRULE\tREGION\tADMITTED\tDENIED\tSHARE\tFRACTION\tALLOWANCE\tUSED\tGRANTED\tCYCLE\tLIMIT\tOVERAGE")
	open := 0
	for _, b := range bill {
		share := ratPercent(b.Share)
		if b.Total {
			share = sharesText(b.Shares, ratPercent, " ")
		}
		if !b.Final && !b.Total {
			open++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", b.Start.UTC().Format(time.RFC3339), finalText(b.Final),
			b.Tenant, b.Rule, b.Region, b.Admitted, b.Denied, share, b.Fraction, ratText(b.Allowance, 3), ratPercent(usedRatio(b.Admitted, b.Allowance)), grantedText(b.Granted),
			cycleText(b.Terms), limitText(b.Terms), b.Overage)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if open > 0 {
		fmt.Fprintf(w, "\n%s in windows not yet final: their counts may still grow.\n", lineCount(open))
	}
	return nil
}

// lineCount is "1 line" or "n lines".
func lineCount(n int) string {
	if n == 1 {
		return "1 line"
	}
	return strconv.Itoa(n) + " lines"
}
