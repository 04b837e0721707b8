package lease

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the expected output in testdata/ scenarios")

// TestScenarios runs the scripts in testdata/. Each script builds a pool
// with commands and checks the output of `allocate`, `fair` or `round`
// against the block after its `----` line:
//
//	pool limit=120 tolerance=0.05 strategy=proportional learning=false
//	node NAME demand=D held=H committed=C absent
//	class NAME weight=W priority=P      (following nodes belong to it)
//	allocate | fair
//	observe NAME admitted=A denied=D interval=1s period=1s
//	hold                                 (every node now holds its grant)
//
// Run with -update to rewrite the expectations after a deliberate change.
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			src, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			got := runScenario(t, string(src))
			if *update {
				if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if got != string(src) {
				t.Errorf("scenario output differs (run with -update to accept):\n--- got\n%s\n--- want\n%s", got, src)
			}
		})
	}
}

type scenarioNode struct {
	name  string
	class string
	claim Claim
	est   float64
}

type scenario struct {
	pool    Pool
	nodes   []*scenarioNode
	classes []*Class
	names   []string // class names, parallel to classes
	class   string   // current class for new nodes
}

// runScenario executes src and returns it with every expected block
// replaced by the actual output.
func runScenario(t *testing.T, src string) string {
	t.Helper()
	var out strings.Builder
	sc := &scenario{pool: Pool{Strategy: Proportional}}
	lines := strings.Split(strings.TrimRight(src, "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		out.WriteString(line + "\n")
		fields := strings.Fields(line)
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		result, produces := sc.exec(t, i+1, fields)
		if !produces {
			continue
		}
		// Skip the old expectation: "----" then lines up to a blank line.
		if i+1 < len(lines) && lines[i+1] == "----" {
			i++
			for i+1 < len(lines) && lines[i+1] != "" {
				i++
			}
		}
		out.WriteString("----\n" + result)
	}
	return out.String()
}

func (sc *scenario) exec(t *testing.T, lineNo int, f []string) (string, bool) {
	t.Helper()
	args := map[string]string{}
	for _, kv := range f[1:] {
		k, v, _ := strings.Cut(kv, "=")
		args[k] = v
	}
	num := func(k string, def float64) float64 {
		v, ok := args[k]
		if !ok {
			return def
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("line %d: %s=%q: %v", lineNo, k, v, err)
		}
		return x
	}
	switch f[0] {
	case "pool":
		sc.pool.Limit = num("limit", 0)
		sc.pool.Tolerance = num("tolerance", 0)
		sc.pool.Learning = args["learning"] == "true"
		if args["strategy"] == "even_split" {
			sc.pool.Strategy = EvenSplit
		}
	case "class":
		sc.class = f[1]
		prio := PriorityExempt
		if args["priority"] != "exempt" {
			prio = Priority(num("priority", 0))
		}
		for i, name := range sc.names {
			if name == f[1] {
				sc.classes[i].Weight, sc.classes[i].Priority = num("weight", 1), prio
				return "", false
			}
		}
		sc.names = append(sc.names, f[1])
		sc.classes = append(sc.classes, &Class{Weight: num("weight", 1), Priority: prio})
	case "node":
		_, absent := args["absent"]
		n := sc.find(f[1], sc.class)
		if n == nil {
			n = &scenarioNode{name: f[1], class: sc.class}
			sc.nodes = append(sc.nodes, n)
		}
		n.claim.Present = !absent
		n.claim.Demand = num("demand", n.claim.Demand)
		n.est = n.claim.Demand
		n.claim.Held = num("held", n.claim.Held)
		n.claim.Committed = num("committed", n.claim.Committed)
	case "observe":
		n := sc.find(f[1], sc.class)
		if n == nil {
			t.Fatalf("line %d: unknown node %s", lineNo, f[1])
		}
		interval, _ := time.ParseDuration(args["interval"])
		period, _ := time.ParseDuration(args["period"])
		n.est = DefaultEstimator().Next(n.est, Observation{Admitted: num("admitted", 0), Denied: num("denied", 0), Interval: interval}, period)
		n.claim.Demand = n.est
	case "allocate":
		claims := sc.claims("")
		Allocate(sc.pool, claims)
		sc.store(claims, "")
		return sc.report(), true
	case "fair":
		var a Allocator
		classes := make([]Class, len(sc.classes))
		for i, c := range sc.classes {
			classes[i] = *c
			classes[i].Claims = sc.claims(sc.names[i])
		}
		a.AllocateFair(sc.pool, classes)
		for i := range classes {
			sc.store(classes[i].Claims, sc.names[i])
			sc.classes[i].Share = classes[i].Share
		}
		return sc.report(), true
	case "hold":
		// Every node now holds what it was granted.
		for _, n := range sc.nodes {
			n.claim.Held = n.claim.Grant
		}
	default:
		t.Fatalf("line %d: unknown command %q", lineNo, f[0])
	}
	return "", false
}

func (sc *scenario) find(name, class string) *scenarioNode {
	for _, n := range sc.nodes {
		if n.name == name && n.class == class {
			return n
		}
	}
	return nil
}

func (sc *scenario) claims(class string) []Claim {
	var cs []Claim
	for i, n := range sc.nodes {
		if n.class == class {
			c := n.claim
			c.Node = int32(i)
			cs = append(cs, c)
		}
	}
	return cs
}

func (sc *scenario) store(claims []Claim, class string) {
	j := 0
	for _, n := range sc.nodes {
		if n.class == class {
			n.claim.Grant = claims[j].Grant
			j++
		}
	}
}

func (sc *scenario) report() string {
	var b strings.Builder
	total := 0.0
	if len(sc.classes) == 0 {
		for _, n := range sc.nodes {
			fmt.Fprintf(&b, "%s %.2f\n", n.name, n.claim.Grant)
			total += n.claim.Grant
		}
	} else {
		for i, c := range sc.classes {
			fmt.Fprintf(&b, "%s %.2f:", sc.names[i], c.Share)
			for _, n := range sc.nodes {
				if n.class == sc.names[i] {
					fmt.Fprintf(&b, " %s %.2f", n.name, n.claim.Grant)
				}
			}
			b.WriteString("\n")
			total += c.Share
		}
	}
	fmt.Fprintf(&b, "total %.2f\n", total)
	return b.String()
}
