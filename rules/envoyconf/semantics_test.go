package envoyconf

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/rules"
	"go.yaml.in/yaml/v3"
)

// FuzzImport checks that Import never panics, and that what it returns is
// a valid rule set that decides descriptors as ratelimit would.
func FuzzImport(f *testing.F) {
	for _, tt := range importTests {
		for _, file := range tt.files {
			f.Add(file.Data)
		}
	}
	for _, tt := range errorTests {
		for _, file := range tt.files {
			f.Add(file.Data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fs := []File{{Name: "fuzz.yaml", Data: data}}
		got, _, err := Import(fs, Options{})
		if err != nil {
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 || !errors.Is(err, ErrInvalid) {
				t.Fatalf("%T %v: want Errors", err, err)
			}
			return
		}
		if _, err := rules.NewSet(0, got); err != nil {
			t.Fatalf("NewSet: %v\n%s", err, data)
		}
		checkSemantics(t, fs, Options{}, got, rand.New(rand.NewPCG(uint64(len(data)), 7)), 50)
	})
}

// The rest is a model of each side, to check that imported rules decide
// descriptors as ratelimit decides them.

// rlConfig is a ratelimit configuration file, as its YAML reads
// (src/config/config_impl.go: YamlRoot, YamlDescriptor, YamlRateLimit).
type rlConfig struct {
	Domain      string          `yaml:"domain"`
	Descriptors []*rlDescriptor `yaml:"descriptors"`
}

type rlDescriptor struct {
	Key            string          `yaml:"key"`
	Value          string          `yaml:"value"`
	RateLimit      *rlRateLimit    `yaml:"rate_limit"`
	Descriptors    []*rlDescriptor `yaml:"descriptors"`
	ShadowMode     bool            `yaml:"shadow_mode"`
	QuotaMode      bool            `yaml:"quota_mode"`
	DetailedMetric bool            `yaml:"detailed_metric"`
	ValueToMetric  bool            `yaml:"value_to_metric"`
	ShareThreshold bool            `yaml:"share_threshold"`
	Metadata       map[string]any  `yaml:"metadata"`
}

type rlRateLimit struct {
	RequestsPerUnit uint32 `yaml:"requests_per_unit"`
	Unit            string `yaml:"unit"`
	Unlimited       bool   `yaml:"unlimited"`
	Name            string `yaml:"name"`
	Replaces        []struct {
		Name string `yaml:"name"`
	} `yaml:"replaces"`
}

type entry struct{ key, value string }

// rlGetLimit is ratelimit's rateLimitConfigImpl.GetLimit: walk the tree,
// at each entry taking the descriptor with the entry's key and value, else
// the first wildcard that matches, else the one with the key alone; the
// limit is the last descriptor's when the walk got that far. It compares
// keys and values apart, where ratelimit joins them with '_' first (so
// that there ("key1", "local") also finds a descriptor keyed "key1_local"):
// that quirk is not Allot's, nor modelled.
func rlGetLimit(cfg *rlConfig, entries []entry) (path []*rlDescriptor, found *rlDescriptor) {
	if cfg == nil {
		return nil, nil
	}
	level := cfg.Descriptors
	for i, e := range entries {
		var next *rlDescriptor
		for _, d := range level {
			if d.Key == e.key && d.Value != "" && d.Value == e.value {
				next = d
				break
			}
		}
		if next == nil {
			for _, d := range level {
				if p, ok := strings.CutSuffix(d.Value, "*"); ok && d.Key == e.key && strings.HasPrefix(e.value, p) {
					next = d
					break
				}
			}
		}
		if next == nil {
			for _, d := range level {
				if d.Key == e.key && d.Value == "" {
					next = d
					break
				}
			}
		}
		if next == nil {
			return path, nil
		}
		path = append(path, next)
		if next.RateLimit != nil && i == len(entries)-1 {
			found = next
		}
		if len(next.Descriptors) == 0 {
			break
		}
		level = next.Descriptors
	}
	return path, found
}

// allotResolve is the agent's compiled.resolve (agent/descriptor.go): at
// each entry, the rules whose entry matches most specifically (exact,
// then the longest prefix, then any value) stay candidates; the answer is
// one with as many entries as the descriptor.
func allotResolve(rs []rules.Rule, domain string, entries []entry) *rules.Rule {
	var cands []*rules.Rule
	for i := range rs {
		if rs[i].Scope == rules.Descriptor && rs[i].Match.Domain == domain {
			cands = append(cands, &rs[i])
		}
	}
	if len(entries) == 0 {
		return nil
	}
	live := make([]bool, len(cands))
	for i := range live {
		live[i] = true
	}
	for level, e := range entries {
		best, bestRank, bestLen := -1, 3, -1
		for i, c := range cands {
			m := c.Match.Descriptors
			if !live[i] || len(m) <= level || !m[level].Matches(e.key, e.value) {
				live[i] = false
				continue
			}
			if rank, n := m[level].Specificity(), len(m[level].Value); rank < bestRank || rank == bestRank && n > bestLen {
				best, bestRank, bestLen = i, rank, n
			}
		}
		if best < 0 {
			return nil
		}
		for i := range cands {
			live[i] = live[i] && cands[i].Match.Descriptors[level] == cands[best].Match.Descriptors[level]
		}
	}
	for i, c := range cands {
		if live[i] && len(c.Match.Descriptors) == len(entries) {
			return c
		}
	}
	return nil
}

// checkSemantics sends random requests of one to three descriptors, made
// from the configurations' own keys and values, to both models, and
// checks that each descriptor meets the same limit in both, after
// replaces.
func checkSemantics(t *testing.T, fs []File, opts Options, got []rules.Rule, rng *rand.Rand, n int) {
	t.Helper()
	cfgs := map[string]*rlConfig{}
	for _, f := range fs {
		var c rlConfig
		if err := yaml.Unmarshal(f.Data, &c); err != nil {
			return // the model reads YAML less leniently; nothing to compare
		}
		cfgs[c.Domain] = &c
	}
	var domains []string
	for d := range cfgs {
		domains = append(domains, d)
	}
	if len(domains) == 0 {
		return
	}
	slices.Sort(domains)
	for range n {
		domain := domains[rng.IntN(len(domains))]
		cfg := cfgs[domain]
		var req [][]entry
		for range 1 + rng.IntN(3) {
			req = append(req, randomDescriptor(cfg, rng))
		}
		// ratelimit: service.constructLimitsToCheck.
		rlFound := make([]*rlDescriptor, len(req))
		rlPaths := make([][]*rlDescriptor, len(req))
		replacing := map[string]bool{}
		for i, d := range req {
			rlPaths[i], rlFound[i] = rlGetLimit(cfg, d)
			if f := rlFound[i]; f != nil {
				for _, r := range f.RateLimit.Replaces {
					replacing[r.Name] = true
				}
				if f.RateLimit.Unlimited {
					rlFound[i] = nil
				}
			}
		}
		for i, f := range rlFound {
			if f != nil && f.RateLimit.Name != "" && replacing[f.RateLimit.Name] {
				rlFound[i] = nil
			}
		}
		// Allot: agent.CheckDescriptors.
		found := make([]*rules.Rule, len(req))
		var gone []string
		for i, d := range req {
			found[i] = allotResolve(got, domain, d)
			if found[i] != nil {
				gone = append(gone, found[i].Replaces...)
			}
		}
		for i, r := range found {
			if r != nil && (slices.Contains(gone, r.Name) || r.Unlimited) {
				found[i] = nil
			}
		}
		for i := range req {
			want := "no limit"
			if f := rlFound[i]; f != nil {
				d, _ := units[strings.ToUpper(f.RateLimit.Unit)]
				want = fmt.Sprintf("%d/%v shadow=%v at %v", f.RateLimit.RequestsPerUnit, d, f.ShadowMode || opts.Shadow, rlEntries(rlPaths[i]))
			}
			have := "no limit"
			if r := found[i]; r != nil {
				have = fmt.Sprintf("%d/%v shadow=%v at %v", r.Limit, r.Period, r.Shadow, r.Match.Descriptors)
			}
			if have != want {
				t.Fatalf("domain %s, request %v, descriptor %d: Allot applies %s (%v), ratelimit %s", domain, req, i, have, found[i], want)
			}
		}
	}
}

func rlEntries(path []*rlDescriptor) []rules.DescriptorEntry {
	var out []rules.DescriptorEntry
	for _, d := range path {
		out = append(out, rules.DescriptorEntry{Key: d.Key, Value: d.Value})
	}
	return out
}

// randomDescriptor walks down the configuration, taking at each level a
// key and a value that match some descriptor there, or nearly do.
func randomDescriptor(cfg *rlConfig, rng *rand.Rand) []entry {
	var out []entry
	level := cfg.Descriptors
	var all []*rlDescriptor
	var collect func([]*rlDescriptor)
	collect = func(ds []*rlDescriptor) {
		for _, d := range ds {
			if d != nil {
				all = append(all, d)
				collect(d.Descriptors)
			}
		}
	}
	collect(cfg.Descriptors)
	for {
		var d *rlDescriptor
		if len(level) > 0 && rng.IntN(8) > 0 {
			d = level[rng.IntN(len(level))]
		} else if len(all) > 0 {
			d = all[rng.IntN(len(all))]
		}
		if d == nil {
			return append(out, entry{"other", "x"})
		}
		// No value ends in a literal '*': ratelimit would find a
		// wildcard descriptor by its text, as an exact value, even one it
		// never reaches as a wildcard, which Import leaves out.
		v := d.Value
		if p, ok := strings.CutSuffix(v, "*"); ok {
			v = p + []string{"", "x", "-1"}[rng.IntN(3)]
		}
		switch rng.IntN(6) {
		case 0: // another value of any descriptor
			o := all[rng.IntN(len(all))]
			v = strings.TrimSuffix(o.Value, "*")
		case 1:
			v += "z"
		case 2:
			if len(v) > 0 {
				v = v[:rng.IntN(len(v))]
			}
		}
		out = append(out, entry{d.Key, v})
		if len(out) >= rules.MaxDescriptorEntries+1 || rng.IntN(3) == 0 {
			return out
		}
		level = d.Descriptors
	}
}

// TestImportLarge imports big configurations in reasonable time: many
// exempted values beside one general limit, many wildcards, and one name
// shared by many limits.
func TestImportLarge(t *testing.T) {
	const n = 10000
	var b strings.Builder
	b.WriteString("domain: large\ndescriptors:\n  - key: ip\n    rate_limit: {unit: second, requests_per_unit: 10}\n")
	for i := range n {
		fmt.Fprintf(&b, "  - key: ip\n    value: 10.%d.%d.%d\n", i>>16, i>>8&255, i&255)
		fmt.Fprintf(&b, "  - key: path\n    value: /p%d/*\n    rate_limit: {name: same, unit: minute, requests_per_unit: 5}\n", i)
	}
	b.WriteString("  - key: admin\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: same}]}\n")
	start := time.Now()
	_, _, err := Import(files("large.yaml", b.String()), Options{})
	if err == nil || !strings.Contains(err.Error(), "names 10000 Allot rules; a rule replaces at most 1000") {
		t.Fatalf("%.300v", err)
	}
	got, _, err := Import(files("large.yaml", strings.Replace(b.String(), ", replaces: [{name: same}]", "", 1)), Options{})
	if err != nil || len(got) != 2*n+2 {
		t.Fatalf("%d rules, %.300v", len(got), err)
	}
	if d := time.Since(start); d > time.Minute {
		t.Errorf("took %v", d)
	}
	t.Logf("%d descriptors twice in %v", 2*n+2, time.Since(start))
}
