package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/allot-io/allot/internal/fleet"
	"io"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/allot-io/allot/billing"
	"github.com/allot-io/allot/internal/spawn"
)

// ledgerSums is the coordinators' ledger summed over billing windows:
// units per tenant and rule.
type ledgerSums map[tenantRule]*units

// readLedgerLines reads every ledger line of the last and next two days,
// as allot usage --format jsonl writes them (a bill's lines, read with
// the type billing writes them from).
func readLedgerLines(ctx context.Context, bin string, addrs, creds []string) ([]billing.JSONLine, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	now := time.Now().UTC()
	args := append([]string{"usage", "--coordinator", strings.Join(addrs, ","), "--format", "jsonl",
		"--from", now.Add(-48 * time.Hour).Format(time.RFC3339), "--to", now.Add(48 * time.Hour).Format(time.RFC3339), "--timeout", "60s"}, creds...)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = spawn.Env()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("allot usage: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	var lines []billing.JSONLine
	dec := json.NewDecoder(&stdout)
	for {
		var line billing.JSONLine
		if err := dec.Decode(&line); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("reading allot usage's output: %w", err)
		}
		if !line.Total { // a multi-region total; there is one region
			lines = append(lines, line)
		}
	}
	return lines, nil
}

// sumLines sums ledger lines per tenant and rule.
func sumLines(lines []billing.JSONLine, rules *ruleSet) ledgerSums {
	l := ledgerSums{}
	for _, line := range lines {
		i, ok := rules.index[line.Rule]
		if !ok {
			i = -1 // a rule the harness never wrote: all of it is double
		}
		k := tenantRule{line.Tenant, i}
		u := l[k]
		if u == nil {
			u = &units{}
			l[k] = u
		}
		u.adm.add(line.Admitted)
		u.den.add(line.Denied)
	}
	return l
}

func (l ledgerSums) equal(o ledgerSums) bool {
	if len(l) != len(o) {
		return false
	}
	for k, u := range l {
		if v := o[k]; v == nil || *v != *u {
			return false
		}
	}
	return true
}

func (a u128) big() *big.Int {
	b := new(big.Int).SetUint64(a.hi)
	b.Lsh(b, 64)
	return b.Or(b, new(big.Int).SetUint64(a.lo))
}

// mismatch is one tenant and rule whose ledger differs from the answers.
type mismatch struct {
	tenant, rule             string
	genAdm, ledAdm           *big.Int
	genDen, ledDen           *big.Int
	lost, double, magnitude2 *big.Int
}

// verdict is the comparison of the ledger with the answers.
type verdict struct {
	mismatches                 []mismatch
	lines                      int
	genAdm, genDen             *big.Int
	ledAdm, ledDen             *big.Int
	lost, double               *big.Int
	lostLines, doubleLines     int
	lostTenants, doubleTenants int
}

// passWithin passes with at most allowed units lost: those a recovery from
// a lost quorum may lose, and only those.
func (v *verdict) passWithin(allowed *big.Int) bool {
	return v.lost.Cmp(allowed) <= 0 && v.double.Sign() == 0
}

// compare compares, per tenant and rule, the units the sidecars answered
// with the ledger: lost is what was answered and is missing, double what
// the ledger holds beyond it.
func compare(got *tally, led ledgerSums, rules *ruleSet) *verdict {
	v := &verdict{genAdm: new(big.Int), genDen: new(big.Int), ledAdm: new(big.Int), ledDen: new(big.Int), lost: new(big.Int), double: new(big.Int)}
	keys := map[tenantRule]bool{}
	for k := range got.byTenant {
		keys[k] = true
	}
	for k := range led {
		keys[k] = true
	}
	lostT, doubleT := map[string]bool{}, map[string]bool{}
	zero := &units{}
	for k := range keys {
		g, l := got.byTenant[k], led[k]
		if g == nil {
			g = zero
		}
		if l == nil {
			l = zero
		}
		v.lines++
		m := mismatch{tenant: k.tenant, rule: "(unknown rule)", genAdm: g.adm.big(), ledAdm: l.adm.big(),
			genDen: g.den.big(), ledDen: l.den.big(), lost: new(big.Int), double: new(big.Int)}
		if k.rule >= 0 {
			m.rule = rules.defs[k.rule].Name
		}
		v.genAdm.Add(v.genAdm, m.genAdm)
		v.genDen.Add(v.genDen, m.genDen)
		v.ledAdm.Add(v.ledAdm, m.ledAdm)
		v.ledDen.Add(v.ledDen, m.ledDen)
		for _, p := range [][2]*big.Int{{m.genAdm, m.ledAdm}, {m.genDen, m.ledDen}} {
			d := new(big.Int).Sub(p[0], p[1])
			if d.Sign() > 0 {
				m.lost.Add(m.lost, d)
			} else {
				m.double.Sub(m.double, d)
			}
		}
		if m.lost.Sign() == 0 && m.double.Sign() == 0 {
			continue
		}
		m.magnitude2 = new(big.Int).Add(m.lost, m.double)
		v.lost.Add(v.lost, m.lost)
		v.double.Add(v.double, m.double)
		if m.lost.Sign() > 0 {
			v.lostLines++
			lostT[k.tenant] = true
		}
		if m.double.Sign() > 0 {
			v.doubleLines++
			doubleT[k.tenant] = true
		}
		v.mismatches = append(v.mismatches, m)
	}
	v.lostTenants, v.doubleTenants = len(lostT), len(doubleT)
	slices.SortFunc(v.mismatches, func(a, b mismatch) int {
		if c := b.magnitude2.Cmp(a.magnitude2); c != 0 {
			return c
		}
		if c := strings.Compare(a.tenant, b.tenant); c != 0 {
			return c
		}
		return strings.Compare(a.rule, b.rule)
	})
	return v
}

// printMismatches writes the first max mismatching lines as a table, and
// all of them as tab-separated values to path.
func printMismatches(w io.Writer, v *verdict, max int, path string) error {
	if len(v.mismatches) == 0 {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("writing mismatches: %w", err)
	}
	defer f.Close()
	all := bufio.NewWriter(f)
	fmt.Fprintln(all, "tenant\trule\tadmitted_answered\tadmitted_ledger\tdenied_answered\tdenied_ledger\tlost\tdouble")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "TENANT\tRULE\tADMITTED\tLEDGER\tDENIED\tLEDGER\tLOST\tDOUBLE\t")
	for i, m := range v.mismatches {
		fmt.Fprintf(all, "%q\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.tenant, m.rule, m.genAdm, m.ledAdm, m.genDen, m.ledDen, m.lost, m.double)
		if i < max {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", clip(strconv.Quote(m.tenant), 32), m.rule, m.genAdm, m.ledAdm, m.genDen, m.ledDen, m.lost, m.double)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if n := len(v.mismatches) - max; n > 0 {
		fmt.Fprintf(w, "… and %d more mismatching lines\n", n)
	}
	fmt.Fprintf(w, "every mismatching line: %s\n", path)
	return all.Flush()
}

// sidecarCounts is what a sidecar says it decided, from its /metrics:
// allot_agent_decisions_total per rule (units, as float64), reports, and
// the checks decided on a rule's fail mode (allot_agent_fallback_decisions_total,
// over every rule).
type sidecarCounts struct {
	adm, den              map[string]float64
	reportsOK, reportsBad float64
	fallback              float64
}

func scrapeSidecar(ctx context.Context, hc *http.Client, s *fleet.Sidecar) (*sidecarCounts, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL("/metrics"), nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s metrics: %w", s.ID, err)
	}
	defer resp.Body.Close()
	sc := &sidecarCounts{adm: map[string]float64{}, den: map[string]float64{}}
	in := bufio.NewScanner(resp.Body)
	in.Buffer(nil, 1<<20)
	for in.Scan() {
		name, labels, value, ok := parseSample(in.Text())
		if !ok {
			continue
		}
		switch {
		case name == "allot_agent_decisions_total" && labels["result"] == "admitted":
			sc.adm[labels["rule"]] = value
		case name == "allot_agent_decisions_total" && labels["result"] == "denied":
			sc.den[labels["rule"]] = value
		case name == "allot_agent_reports_total" && labels["result"] == "ok":
			sc.reportsOK = value
		case name == "allot_agent_reports_total" && labels["result"] == "failed":
			sc.reportsBad = value
		case name == "allot_agent_fallback_decisions_total":
			sc.fallback += value
		}
	}
	return sc, in.Err()
}

// parseSample reads one Prometheus text-format sample whose label values
// hold no commas or quotes (rule names and results do not).
func parseSample(line string) (name string, labels map[string]string, value float64, ok bool) {
	if line == "" || line[0] == '#' {
		return "", nil, 0, false
	}
	head, val, found := strings.Cut(line, " ")
	if !found {
		return "", nil, 0, false
	}
	v, err := strconv.ParseFloat(strings.Fields(val)[0], 64)
	if err != nil {
		return "", nil, 0, false
	}
	labels = map[string]string{}
	name, rest, hasLabels := strings.Cut(head, "{")
	if hasLabels {
		for _, kv := range strings.Split(strings.TrimSuffix(rest, "}"), ",") {
			if k, lv, ok := strings.Cut(kv, "="); ok {
				labels[k] = strings.Trim(lv, `"`)
			}
		}
	}
	return name, labels, v, true
}

// printSidecarCheck compares, per sidecar and rule, the units the harness
// was answered with what the sidecar's own counters say. A sidecar that
// counts less than it answered lost units before reporting (its usage
// table); one that counts all but whose units miss the ledger lost them on
// the way (reports).
func printSidecarCheck(w io.Writer, got *tally, rules *ruleSet, sidecars []*fleet.Sidecar, counts []*sidecarCounts) {
	for n, s := range sidecars {
		sc := counts[n]
		if sc == nil {
			fmt.Fprintf(w, "%s: no metrics\n", s.ID)
			continue
		}
		fmt.Fprintf(w, "%s: reports ok %.0f, failed %.0f\n", s.ID, sc.reportsOK, sc.reportsBad)
		for i, d := range rules.defs {
			ga, _ := new(big.Float).SetInt(got.byNode[n][i].adm.big()).Float64()
			gd, _ := new(big.Float).SetInt(got.byNode[n][i].den.big()).Float64()
			if ga != sc.adm[d.Name] || gd != sc.den[d.Name] {
				fmt.Fprintf(w, "  %s %-14s answered admitted %.17g denied %.17g; its counters say admitted %.17g denied %.17g\n",
					s.ID, d.Name, ga, gd, sc.adm[d.Name], sc.den[d.Name])
			}
		}
	}
}

func mismatchPath(dir string) string { return filepath.Join(dir, "mismatches.tsv") }
