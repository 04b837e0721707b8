package main

import (
	"fmt"
	"strings"
)

// target is one tolerance a scenario's figures are held to (issue 11).
type target struct {
	name string
	met  bool
}

// targets are the row's: for a quota, worst ≤ 105% (with the first
// seconds when tenants arrive) and average ≥ 99.5%; for capacity, worst ≤
// 103%; for abuse, never over.
func (r row) targets() []target {
	f := r.real
	worst := f.worst
	if r.s.newTenants {
		for _, x := range f.first {
			worst = max(worst, x)
		}
	}
	switch r.s.intent() {
	case "capacity":
		return []target{{"worst<=103%", worst <= 1.03}}
	case "abuse":
		return []target{{"worst<=100%", worst <= 1.0}}
	default:
		return []target{{"worst<=105%", worst <= 1.05}, {"avg>=99.5%", f.ok && f.avg >= 0.995}}
	}
}

func missed(rows []row) int {
	n := 0
	for _, r := range rows {
		for _, t := range r.targets() {
			if !t.met {
				n++
			}
		}
	}
	return n
}

func pct(x float64) string { return fmt.Sprintf("%.1f%%", 100*x) }

// delta is real minus simulated, in points of the limit.
func delta(real, sim float64) string { return fmt.Sprintf("%+.1f", 100*(real-sim)) }

func firsts(f figures) string {
	s := make([]string, len(f.first))
	for i, x := range f.first {
		s[i] = fmt.Sprintf("%.0f", 100*x)
	}
	return strings.Join(s, "/")
}

func (r row) targetText() string {
	var s []string
	for _, t := range r.targets() {
		v := "MISS"
		if t.met {
			v = "PASS"
		}
		s = append(s, t.name+" "+v)
	}
	return strings.Join(s, ", ")
}

// cells are the row's columns in the table.
func (r row) cells() []string {
	name := r.s.name
	if r.s.rule.Scope == "global" || r.s.intent() != "quota" {
		name += fmt.Sprintf(" (%s %s %s)", r.s.rule.Scope, r.s.intent(), r.s.rule.Algorithm)
	}
	c := []string{fmt.Sprint(r.nodes), name, pct(r.real.worst)}
	if r.simNote != "" {
		c = append(c, "—", "", pct(r.real.avg), "—", "", firsts(r.real), "—", pct(r.real.under), "—")
	} else {
		c = append(c, pct(r.sim.worst), delta(r.real.worst, r.sim.worst), pct(r.real.avg), pct(r.sim.avg), delta(r.real.avg, r.sim.avg),
			firsts(r.real), firsts(r.sim), pct(r.real.under), pct(r.sim.under))
	}
	return append(c, r.targetText())
}

// line is the row on one line, for the log.
func (r row) line() string {
	c := r.cells()
	return fmt.Sprintf("%s sidecars, %s: worst %s (sim %s), average %s (sim %s), first bins %s%% (sim %s%%), bins under 99.5%%: %s (sim %s); %s",
		c[0], c[1], c[2], c[3], c[5], c[6], c[8], c[9], c[10], c[11], c[12])
}

// table is every row as a Markdown table, with the legend above it.
func table(rows []row) string {
	var b strings.Builder
	b.WriteString("Admitted ÷ limit per tenant per second (per window for fixed windows), real processes next to allot sim (quota-lease).\n")
	b.WriteString("worst and avg leave out each tenant's warm-up; avg and <99.5% count only the bins where demand exceeded the limit;\n")
	b.WriteString("first: the worst tenant's first three bins from its first check; Δ: real − sim, in points of the limit.\n\n")
	b.WriteString("| sidecars | scenario | worst | sim | Δ | avg | sim | Δ | first bins % | sim | bins <99.5% | sim | targets |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		b.WriteString("| " + strings.Join(r.cells(), " | ") + " |\n")
	}
	fmt.Fprintf(&b, "\n%d targets missed.\n", missed(rows))
	return b.String()
}
