package envoyconf

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
)

// The configurations below are envoyproxy/ratelimit's own, from its
// README.md and test/config/ (at commit f2fb157), each citing where it
// comes from; "adapted" ones leave out what Allot refuses, which the
// error cases take up instead.

// rule is a rule as the tests write it: NAME@LINE DOMAIN: ENTRIES: LIMIT,
// where LINE is the line its description names, ENTRIES are key=value
// (key alone for any value), and LIMIT is N/PERIOD, with shadow and
// replaces=NAMES after, or unlimited.
func summary(r rules.Rule) string {
	line := "?"
	if m := descLine.FindStringSubmatch(r.Description); m != nil {
		line = m[1]
	}
	var es []string
	for _, e := range r.Match.Descriptors {
		if e.Value == "" {
			es = append(es, e.Key)
		} else {
			es = append(es, e.Key+"="+e.Value)
		}
	}
	lim := "unlimited"
	if !r.Unlimited {
		lim = fmt.Sprintf("%d/%s", r.Limit, r.Period)
		if r.Shadow {
			lim += " shadow"
		}
	}
	if len(r.Replaces) > 0 {
		lim += " replaces=" + strings.Join(r.Replaces, ",")
	}
	return fmt.Sprintf("%s@%s %s: %s: %s", r.Name, line, r.Match.Domain, strings.Join(es, " "), lim)
}

var descLine = regexp.MustCompile(`^Imported from envoyproxy/ratelimit [^ ]+:(\d+), `)

func files(nameData ...string) []File {
	var out []File
	for i := 0; i+1 < len(nameData); i += 2 {
		out = append(out, File{Name: nameData[i], Data: []byte(nameData[i+1])})
	}
	return out
}

var importTests = []struct {
	name     string
	files    []File
	opts     Options
	want     []string
	warnings []string // each a substring of one warning, in order
}{
	{
		name:  "README example 1",
		files: files("config.yaml", mongoCPS),
		want: []string{
			"mongo_cps.database_users@4 mongo_cps: database=users: 500/1s",
			"mongo_cps.database_default@10 mongo_cps: database=default: 500/1s",
		},
	},
	{
		name:  "test/config/basic_config.yaml",
		files: files("basic_config.yaml", basicConfig),
		want: []string{
			"test-domain.key1_value1.subkey1@9 test-domain: key1=value1 subkey1: 5/1s",
			"test-domain.key1_value1.subkey1_subvalue1@15 test-domain: key1=value1 subkey1=subvalue1: 10/1s",
			"test-domain.key2@22 test-domain: key2: 20/1m0s",
			"test-domain.key2_value2@28 test-domain: key2=value2: 30/1m0s",
			// value3 has no limit: ratelimit applies none, not key2's.
			"test-domain.key2_value3@35 test-domain: key2=value3: unlimited",
			"test-domain.key3@38 test-domain: key3: 1/1h0m0s",
			"key4_rate_limit@43 test-domain: key4: 1/24h0m0s",
			"test-domain.key5_value5@49 test-domain: key5=value5: 15/24h0m0s",
			"test-domain.key5_value5.subkey5_subvalue5@55 test-domain: key5=value5 subkey5=subvalue5: 25/24h0m0s",
			"test-domain.key6@61 test-domain: key6: unlimited",
			"test-domain.key7@67 test-domain: key7: 70/1m0s",
		},
		warnings: []string{"basic_config.yaml:67: domain test-domain: descriptors[8]: detailed_metric only names ratelimit's metrics by value"},
	},
	{
		name:  "README example 2: nested",
		files: files("messaging.yaml", messaging),
		want: []string{
			"messaging.message_type_marketing.to_number@7 messaging: message_type=marketing to_number: 5/24h0m0s",
			"messaging.to_number@13 messaging: to_number: 100/24h0m0s",
		},
	},
	{
		name:  "README example 4: depth",
		files: files("example4.yaml", example4),
		want:  []string{"example4.key_value.subkey@6 example4: key=value subkey: 300/1s"},
	},
	{
		name:  "README example 5: unlimited",
		files: files("internal.yaml", internal),
		want: []string{
			"internal.ldap@3 internal: ldap: unlimited",
			"internal.azure@7 internal: azure: 100/1m0s",
		},
	},
	{
		name:  "README example 6: shadow_mode",
		files: files("example6.yaml", example6),
		want: []string{
			"example6.service.user_user-a@5 example6: service user=user-a: 10/1s shadow",
			"example6.service.user_user-b@11 example6: service user=user-b: 20/1s",
		},
	},
	{
		name:  "README example 7: replaces",
		files: files("example7.yaml", example7),
		want: []string{
			"specific_limit@6 example7: key_1=value_1 user=bkthomps: 5/1s",
			"example7.key_2_value_2.user_bkthomps@15 example7: key_2=value_2 user=bkthomps: 10/1s replaces=specific_limit",
		},
	},
	{
		name:  "README example 8: detailed_metric",
		files: files("example8.yaml", example8),
		want: []string{
			"example8.key1@3 example8: key1: 10/1m0s",
			"example8.key1_value1@8 example8: key1=value1: 20/1m0s",
		},
		warnings: []string{"example8.yaml:3: domain example8: descriptors[0]: detailed_metric only"},
	},
	{
		name:  "README example 10: value_to_metric",
		files: files("example10.yaml", example10),
		want:  []string{"example10.route.http_method.subject_id@9 example10: route http_method subject_id: 60/1m0s"},
		warnings: []string{
			"example10.yaml:3: domain example10: descriptors[0]: value_to_metric only",
			"example10.yaml:6: domain example10: descriptors[0].descriptors[0]: value_to_metric only",
		},
	},
	{
		name:  "test/config/shadowmode_config.yaml",
		files: files("shadowmode_config.yaml", shadowModeConfig),
		want: []string{
			"test-domain.key1_value1.subkey1@9 test-domain: key1=value1 subkey1: 5/1s",
			"test-domain.key1_value1.subkey1_subvalue1@15 test-domain: key1=value1 subkey1=subvalue1: 10/1s shadow",
			"test-domain.key2@23 test-domain: key2: 20/1m0s shadow",
			"test-domain.key2_value2@29 test-domain: key2=value2: 30/1m0s",
		},
	},
	{
		name:  "test/config/wildcard.yaml, adapted",
		files: files("wildcard.yaml", wildcard),
		want: []string{
			"test-domain.wild_foo_@4 test-domain: wild=foo*: 20/1m0s",
			"test-domain.noWild_foo@9 test-domain: noWild=foo: 20/1m0s",
			"test-domain.noVal@14 test-domain: noVal: 20/1m0s",
			"test-domain.nestedWild_val1.wild_goo_@21 test-domain: nestedWild=val1 wild=goo*: 20/1m0s",
		},
	},
	{
		name:  "examples/ratelimit/config/example.yaml, adapted",
		files: files("example.yaml", exampleRL),
		want: []string{
			"rl.category_account@4 rl: category=account: 4/1m0s replaces=bkthomps,fake_name",
			"rl.source_cluster_proxy.destination_cluster_bkthomps@15 rl: source_cluster=proxy destination_cluster=bkthomps: 2/1m0s replaces=bkthomps",
			"rl.source_cluster_proxy.destination_cluster_mock@22 rl: source_cluster=proxy destination_cluster=mock: 1/1m0s",
			"rl.source_cluster_proxy.destination_cluster_override@27 rl: source_cluster=proxy destination_cluster=override: 2/1m0s",
			"fake_name@34 rl: source_cluster=proxy destination_cluster=fake: 2/1m0s",
			"rl.foo@40 rl: foo: 2/1m0s",
			"rl.foo.bar@45 rl: foo bar: 3/1m0s",
			"bkthomps@49 rl: foo bar=bkthomps: 1/1m0s",
			"rl.foo.baz@55 rl: foo baz: 1/1s",
			"rl.foo.baz_not-so-shady@59 rl: foo baz=not-so-shady: 3/1m0s",
			"rl.foo.baz_shady@64 rl: foo baz=shady: 3/1m0s shadow",
			"rl.foo.bay@70 rl: foo bay: unlimited",
			"rl.unspec@73 rl: unspec: 2/1m0s",
			"rl.qux@78 rl: qux: unlimited",
		},
		warnings: []string{
			"example.yaml:73: domain rl: descriptors[3]: detailed_metric only",
			`example.yaml:31: domain rl: descriptors[1].descriptors[2].rate_limit.replaces[0]: no rate limit in domain rl is named "banned_limit"`,
		},
	},
	{
		name:  "every unit, two files",
		files: files("another.yaml", another, "long.yaml", longUnits),
		want: []string{
			"another.key2@3 another: key2: 20/1m0s",
			"another.key3@8 another: key3: 10/1h0m0s",
			"another.key2_local@13 another: key2_local: 20/1m0s",
			"another.key3_local@18 another: key3_local: 10/1h0m0s",
			"another.key4@23 another: key4: 20/24h0m0s",
			"another.key4_local@28 another: key4_local: 20/24h0m0s",
			"long.per_second@3 long: per_second: 1/1s",
			"long.per_week@5 long: per_week: 7/168h0m0s",
			"long.per_month@7 long: per_month: 30/720h0m0s",
			"long.per_year@9 long: per_year: 4294967295/8760h0m0s",
		},
	},
	{
		name:  "wildcards in file order",
		files: files("ordered.yaml", ordered),
		want: []string{
			"ordered.path__api_v1__@3 ordered: path=/api/v1/*: 1/1s",
			"ordered.path__api__@6 ordered: path=/api/*: 2/1s",
			"ordered.path__api_v1_users@12 ordered: path=/api/v1/users: 4/1s",
		},
		warnings: []string{`ordered.yaml:9: domain ordered: descriptors[2]: value "/api/v1/users*" is never used as a wildcard: ratelimit tries wildcards in file order, and "/api/v1/*" (line 3) before it`},
	},
	{
		name:  "descriptors without a rate_limit",
		files: files("shadowing.yaml", shadowing),
		want: []string{
			"shadowing.tenant_internal@3 shadowing: tenant=internal: unlimited",
			"shadowing.tenant_beta_@8 shadowing: tenant=beta*: unlimited",
			"shadowing.tenant_beta-partner@10 shadowing: tenant=beta-partner: unlimited",
			"shadowing.tenant.path@14 shadowing: tenant path: 100/1m0s",
			// route=/admin* has no more general sibling with rules: no rule.
			"shadowing.route__@18 shadowing: route=/: 50/1s",
		},
	},
	{
		name:  "names shared, invalid and taken",
		files: files("shared.yaml", sharedNames),
		want: []string{
			"vip-499cc23a@3 shared: user=alice: 100/1s",
			"vip-65318be5@6 shared: user=bob: 200/1s",
			"shared.plan_enterprise@9 shared: plan=enterprise: 1000/1s replaces=vip-499cc23a,vip-65318be5",
			"team_limit-028b3d64@15 shared: team: 10/1m0s",
			// The generated name is taken by a rate_limit's name.
			"shared.user_carol-d5406097@17 shared: user=carol: 1/1m0s",
			"shared.user_carol@20 shared: carol: 2/1m0s",
		},
		warnings: []string{
			`shared.yaml:5: domain shared: descriptors[0].rate_limit.name: "vip" also names the rate limit at shared.yaml:6`,
			`shared.yaml:8: domain shared: descriptors[1].rate_limit.name: "vip" also names the rate limit at shared.yaml:3`,
			`shared.yaml:16: domain shared: descriptors[3].rate_limit.name: "team limit" is not a valid Allot rule name`,
			`shared.yaml:14: domain shared: descriptors[2].rate_limit.replaces[1]: no rate limit in domain shared is named "nobody"`,
		},
	},
	{
		name:  "anchors, aliases and merge keys",
		files: files("anchors.yaml", anchors),
		want: []string{
			"anchors.a@3 anchors: a: 10/1m0s",
			"anchors.b@5 anchors: b: 20/1m0s",
			"anchors.c_1@9 anchors: c=1: 10/1m0s",
			"anchors.c_2@13 anchors: c=2: 10/1m0s",
		},
	},
	{
		name:  "intent and shadow options",
		files: files("internal.yaml", internal),
		opts:  Options{Intent: lease.Quota, Shadow: true},
		want: []string{
			"internal.ldap@3 internal: ldap: unlimited",
			"internal.azure@7 internal: azure: 100/1m0s shadow",
		},
	},
	{
		name:     "a domain without limits",
		files:    files("empty-domain.yaml", "domain: nothing\ndescriptors:\n  - key: a\n    value: b\n"),
		warnings: []string{"empty-domain.yaml:1: domain nothing: no descriptor here has a rate_limit, so no rules"},
	},
	{
		name:     "inert fields",
		files:    files("inert.yaml", "domain: d\ndescriptors:\n  - key: a\n    shadow_mode: true\n    quota_mode: true\n    metadata: {x: 1}\n    rate_limit:\n    descriptors:\n      - key: b\n        rate_limit: {unlimited: true}\n        shadow_mode: true\n"),
		want:     []string{"d.a.b@9 d: a b: unlimited"},
		warnings: []string{"inert.yaml:7: domain d: descriptors[0].rate_limit: is empty", "inert.yaml:5: domain d: descriptors[0].quota_mode: has no effect", "inert.yaml:6: domain d: descriptors[0].metadata: has no effect", "inert.yaml:4: domain d: descriptors[0].shadow_mode: has no effect", "inert.yaml:11: domain d: descriptors[0].descriptors[0].shadow_mode: has no effect on an unlimited"},
	},
}

func TestImport(t *testing.T) {
	for _, tt := range importTests {
		t.Run(tt.name, func(t *testing.T) {
			got, warnings, err := Import(tt.files, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			var sums []string
			for _, r := range got {
				sums = append(sums, summary(r))
			}
			if !slices.Equal(sums, tt.want) {
				t.Errorf("rules:\n\t%s\nwant:\n\t%s", strings.Join(sums, "\n\t"), strings.Join(tt.want, "\n\t"))
			}
			intent := tt.opts.Intent
			if intent == 0 {
				intent = lease.Capacity
			}
			for _, r := range got {
				if r.Scope != rules.Descriptor || len(r.Key) != 0 {
					t.Errorf("%s: scope %v key %v, want a descriptor rule with the default key", r.Name, r.Scope, r.Key)
				}
				if !r.Unlimited && (r.Algorithm != algo.FixedWindow || r.Intent != intent || r.Burst != 0) {
					t.Errorf("%s: %v, intent %v, burst %d; want fixed_window, %v, no burst", r.Name, r.Algorithm, r.Intent, r.Burst, intent)
				}
			}
			if _, err := rules.NewSet(1, got); err != nil {
				t.Errorf("NewSet: %v", err)
			}
			var ws []string
			for _, w := range warnings {
				ws = append(ws, w.String())
			}
			if len(ws) != len(tt.warnings) {
				t.Errorf("warnings:\n\t%s\nwant %d", strings.Join(ws, "\n\t"), len(tt.warnings))
			}
			for i, want := range tt.warnings {
				if i < len(ws) && !strings.Contains(ws[i], want) {
					t.Errorf("warning %d: %q\nwant it to contain %q", i, ws[i], want)
				}
			}
			checkSemantics(t, tt.files, tt.opts, got, rand.New(rand.NewPCG(1, uint64(len(tt.name)))), 3000)
		})
	}
}

func TestImportDeepest(t *testing.T) {
	got, _, err := Import(files("deep.yaml", deepConfig(rules.MaxDescriptorEntries)), Options{})
	if err != nil || len(got) != 1 || len(got[0].Match.Descriptors) != rules.MaxDescriptorEntries {
		t.Fatalf("%v, %v", got, err)
	}
}

func TestImportLongNames(t *testing.T) {
	long := strings.Repeat("v", 200)
	cfg := fmt.Sprintf("domain: d\ndescriptors:\n  - key: k\n    value: %s\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: k\n    value: %s*\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: \"k?\"\n    value: x\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: k_\n    value: x\n    rate_limit: {unit: second, requests_per_unit: 1}\n", long, long)
	got, _, err := Import(files("long.yaml", cfg), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range got {
		names = append(names, r.Name)
	}
	if len(names) != 4 || names[2] != "d.k__x" || !strings.HasPrefix(names[3], "d.k__x-") {
		t.Errorf("names %q", names)
	}
	for _, n := range names[:2] {
		if len(n) != 128 || !strings.HasPrefix(n, "d.k_vvv") {
			t.Errorf("name %q: want 128 characters", n)
		}
	}
	// The same files give the same names.
	again, _, _ := Import(files("long.yaml", cfg), Options{})
	for i := range again {
		if again[i].Name != names[i] {
			t.Errorf("name %d: %q, then %q", i, names[i], again[i].Name)
		}
	}
}

func TestImportTestdata(t *testing.T) {
	paths, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("testdata: %v", err)
	}
	var fs []File
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, File{Name: p, Data: data})
	}
	got, warnings, err := Import(fs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 {
		t.Fatal("no rules")
	}
	for _, w := range warnings {
		t.Log(w)
	}
	checkSemantics(t, fs, Options{}, got, rand.New(rand.NewPCG(2, 3)), 5000)
}

func TestImportOptions(t *testing.T) {
	if _, _, err := Import(files("a.yaml", mongoCPS), Options{Intent: 9}); err == nil {
		t.Error("intent 9 accepted")
	}
	got, _, err := Import(nil, Options{})
	if err != nil || len(got) != 0 {
		t.Errorf("no files: %v, %v", got, err)
	}
}

func TestImportBounds(t *testing.T) {
	// An alias bomb: each level names the one before ten times.
	var b strings.Builder
	b.WriteString("domain: bomb\nx0: &x0 {key: k, rate_limit: {unit: second, requests_per_unit: 1}}\n")
	for i := 1; i <= 8; i++ {
		fmt.Fprintf(&b, "x%d: &x%d {key: k%d, descriptors: [", i, i, i)
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*x%d", i-1)
		}
		b.WriteString("]}\n")
	}
	b.WriteString("descriptors: [*x8]\n")
	// Expanded, the bomb is 10^8 descriptors. The import must stop at
	// MaxDescriptors: every descriptor read reports at most one problem
	// here (a duplicate), so at most MaxDescriptors problems, and one
	// says why it stopped. That count is the bound, not the time:
	// reading 10^5 descriptors takes 1.7 s on an idle 2-core machine and
	// took 19 s under -race beside the rest of make test, which failed a
	// 10 s limit. The time is checked only against what the whole bomb
	// would take, a thousand times the bound's work.
	start := time.Now()
	_, _, err := Import(files("bomb.yaml", b.String()), Options{})
	took := time.Since(start)
	var es Errors
	if !errors.As(err, &es) || len(es) == 0 {
		t.Fatalf("the bomb imported: %v", err)
	}
	if len(es) > MaxDescriptors+1 || took > 2*time.Minute {
		t.Fatalf("%d problems reported in %v; the import read past MaxDescriptors (%d)", len(es), took, MaxDescriptors)
	}
	if !slices.ContainsFunc(es, func(e *Error) bool {
		msg := e.Error()
		return strings.Contains(msg, "bomb.yaml:") && (strings.Contains(msg, "more than 100000 descriptors") || strings.Contains(msg, "YAML nodes"))
	}) {
		t.Errorf("none of the %d problems says why the import stopped; the first: %v", len(es), es[0])
	}
	// A descriptor that is its own descendant.
	_, _, err = Import(files("loop.yaml", "domain: loop\ndescriptors:\n  - &a {key: k, descriptors: [*a]}\n"), Options{})
	if err == nil {
		t.Fatal("loop accepted")
	}
}
