package sim

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
)

// WriteTable prints results as a table for a terminal.
func WriteTable(w io.Writer, s *Scenario, results []*Result) error {
	fmt.Fprintf(w, "scenario %s: %d nodes, %.0f req/s, %v (first %v excluded), report every %v, seed %d\n",
		s.Name, s.Nodes, s.Rate, s.Duration, s.Warmup, s.Interval, s.Seed)
	fmt.Fprintf(w, "rule: %s %d per %v, scope %s, intent %s\n\n", s.Rule.Algorithm, s.Rule.Limit, s.Rule.Period, scopeOf(s), s.Rule.Intent)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tadmitted ÷ due\tpeak overshoot\twrongful denials\tleaked\tconvergence (intervals)\tstore trips/req\tcoord msgs/s\tfairness\t")
	for _, r := range results {
		conv, fair := "-", "-"
		if r.ConvergenceIntervals != nil {
			conv = strconv.Itoa(*r.ConvergenceIntervals)
		}
		if r.Fairness != nil {
			fair = fmt.Sprintf("%.3f", *r.Fairness)
		}
		fmt.Fprintf(tw, "%s\t%.2f%%\t%.2f%%\t%.4f%%\t%.4f%%\t%s\t%.2f\t%.0f\t%s\t\n", r.Strategy,
			100*r.AdmittedRatio, 100*r.PeakOvershoot, 100*r.WrongfulDenials, 100*r.Leaked, conv, r.StoreRoundTripsPerRequest, r.CoordinatorMessagesPerSecond, fair)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range results {
		if d := r.During; d != nil {
			fmt.Fprintf(w, "during the event (%v to %v), %s: admitted ÷ due %.2f%%, peak %.2f%%, wrongful %.4f%%, leaked %.4f%%\n",
				d.From, d.To, r.Strategy, 100*d.AdmittedRatio, 100*d.PeakOvershoot, 100*d.WrongfulDenials, 100*d.Leaked)
		}
	}
	for _, r := range results {
		if d := r.Settled; d != nil {
			fmt.Fprintf(w, "settled (three region intervals after each move left out), %s: admitted ÷ due %.2f%%, peak %.2f%%, wrongful %.4f%%, leaked %.4f%%\n",
				r.Strategy, 100*d.AdmittedRatio, 100*d.PeakOvershoot, 100*d.WrongfulDenials, 100*d.Leaked)
		}
	}
	if g := s.Regions; g != nil {
		fmt.Fprintf(w, "regions: %d, reporting to the parent every %v, %v + up to %v each way, %.1f%% lost\n",
			g.Count, g.regionInterval(), g.Delay, g.Jitter, 100*g.Loss)
	}
	if s.Shards != nil {
		return writeShards(w, s, results)
	}
	return nil
}

func scopeOf(s *Scenario) string {
	if s.Rule.Scope == "" {
		return "tenant"
	}
	return s.Rule.Scope
}

// WriteJSON prints one object per strategy, as a JSON array.
func WriteJSON(w io.Writer, results []*Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(results)
}

// WriteCSV writes every strategy's per-window figures.
func WriteCSV(w io.Writer, results []*Result) error {
	cw := csv.NewWriter(w)
	if err := cw.Write([]string{"strategy", "window_start_s", "offered", "admitted", "denied", "wrongful", "leaked", "limit", "due", "admitted_over_due", "peak_tenant_over_limit"}); err != nil {
		return err
	}
	for _, r := range results {
		for _, win := range r.Windows {
			ratio := 0.0
			if win.Due > 0 {
				ratio = float64(win.Admitted) / float64(win.Due)
			}
			rec := []string{r.Strategy, strconv.FormatFloat(win.Start.Seconds(), 'f', 3, 64),
				strconv.FormatInt(win.Offered, 10), strconv.FormatInt(win.Admitted, 10), strconv.FormatInt(win.Denied, 10),
				strconv.FormatInt(win.Wrongful, 10), strconv.FormatInt(win.Leaked, 10), strconv.FormatInt(win.Limit, 10), strconv.FormatInt(win.Due, 10),
				strconv.FormatFloat(ratio, 'f', 4, 64), strconv.FormatFloat(win.Peak, 'f', 4, 64)}
			if err := cw.Write(rec); err != nil {
				return err
			}
		}
	}
	cw.Flush()
	return cw.Error()
}
