package main

import (
	"strings"
	"testing"
)

// TestOverridesRoundTrip: what 'overrides list' prints as CSV or JSON
// lines imports as a no-op (the version kept, expiries to the
// nanosecond); 'get' prints as 'list' does; every bad line of an import is
// reported and nothing is applied; a put with neither --limit nor
// --weight says to give one.
func TestOverridesRoundTrip(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a coordinator")
	}
	tc := startTestCluster(t, "c1", "eu", "")
	run := func(args ...string) (int, string, string) {
		t.Helper()
		return runIn(t, nil, append(args, "--coordinator", tc.addr)...)
	}
	if code, _, stderr := run("rules", "put", writeTemp(t, "rules.yaml", "rules:\n"+ruleText("tenant-quota"))); code != exitOK {
		t.Fatalf("rules put: %s", stderr)
	}
	// An expiry 72 hours from now, to the nanosecond, as --expires 72h sets.
	if code, stdout, stderr := run("overrides", "put", "tenant-quota", "acme", "--limit", "50", "--expires", "72h"); code != exitOK {
		t.Fatalf("put: exit %d, %s%s", code, stdout, stderr)
	}
	more := writeTemp(t, "more.csv", "rule,tenant,limit\ntenant-quota,beta,60\ntenant-quota,gamma,70\n")
	if code, stdout, stderr := run("overrides", "import", more); code != exitOK || stdout != "overrides version 2: 2 imported from "+more+" in 1 batch\n" {
		t.Errorf("import: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	list := func(format string) (string, string) {
		t.Helper()
		code, stdout, stderr := run("overrides", "list", "--format", format)
		if code != exitOK {
			t.Fatalf("list --format %s: exit %d, %s", format, code, stderr)
		}
		return stdout, stderr
	}

	for _, format := range []string{"csv", "jsonl"} {
		t.Run("round trip "+format, func(t *testing.T) {
			before, version := list(format)
			if !strings.Contains(version, "overrides version 2, 3 in the cluster") {
				t.Fatalf("list: stderr %q", version)
			}
			code, stdout, stderr := run("overrides", "import", "--format", format, writeTemp(t, "exported", before))
			if code != exitOK || !strings.HasPrefix(stdout, "overrides version 2 kept: the 3 overrides of ") || !strings.HasSuffix(stdout, " are in force as they are; nothing changed\n") {
				t.Errorf("import of what list printed: exit %d, stdout %q, stderr %q", code, stdout, stderr)
			}
			if after, v := list(format); after != before || v != version {
				t.Errorf("after the round trip, list prints\n%s%s\nwhere before it printed\n%s%s", after, v, before, version)
			}
		})
	}

	t.Run("a put of what is in force", func(t *testing.T) {
		code, stdout, stderr := run("overrides", "put", "tenant-quota", "beta", "--limit", "60")
		if code != exitOK || stdout != "overrides version 2 kept: tenant-quota/beta is already so; nothing changed\n" {
			t.Errorf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
	})

	t.Run("get and list agree", func(t *testing.T) {
		for _, format := range []string{"", "table", "csv", "jsonl"} {
			args := []string{"overrides", "get", "tenant-quota", "beta"}
			listArgs := []string{"overrides", "list", "--prefix", "beta"}
			if format != "" {
				args = append(args, "--format", format)
				listArgs = append(listArgs, "--format", format)
			}
			code, got, stderr := run(args...)
			_, want, _ := run(listArgs...)
			if code != exitOK || got != want {
				t.Errorf("%s: exit %d, stderr %q, printed\n%s\nwhere list printed\n%s", strings.Join(args, " "), code, stderr, got, want)
			}
		}
	})

	t.Run("bad input", func(t *testing.T) {
		csvFile := writeTemp(t, "bad.csv", "rule,tenant,limit\n"+
			"tenant-quota,t1,10\n"+ // line 2: good
			"tenant-quota,t2,ten\n"+ // line 3
			"tenant-quota,,30\n"+ // line 4
			"tenant-quota,t1,40\n"+ // line 5: t1 again
			"tenant-quota,t5,50,extra\n") // line 6
		jsonFile := writeTemp(t, "bad.jsonl", `{"rule":"tenant-quota","tenant":"t1","limit":"5"}`+"\n"+
			`{"rule":"tenant-quota","tenant":"t2","limit":5,"colour":"blue"}`+"\n"+
			`{"rule":"tenant-quota","tenant":"t3"}`+"\n"+
			`{"rule":"tenant-quota","tenant":"t4","limit":5}`+"\n") // good
		for _, tt := range []struct {
			args []string
			want []string
		}{
			{[]string{"overrides", "put", "tenant-quota", "x"}, []string{"give --limit, --weight, --anchor-day or --time-zone"}},
			{[]string{"overrides", "import", csvFile}, []string{
				csvFile + `:3: limit "ten": not an integer`,
				csvFile + ":4: tenant: missing",
				csvFile + `:5: tenant "t1" under rule "tenant-quota" is also on line 2`,
				csvFile + ":6: wrong number of fields",
				csvFile + ": 4 problems; nothing was imported",
			}},
			{[]string{"overrides", "import", jsonFile}, []string{
				jsonFile + ":1: limit: must be an integer, got a JSON string",
				jsonFile + `:2: unknown field "colour"`,
				jsonFile + ":3: limit: an override sets a limit, a weight or a cycle",
				jsonFile + ": 3 problems; nothing was imported",
			}},
			{[]string{"overrides", "import", writeTemp(t, "refused.jsonl", `{"rule":"gone","tenant":"t1","limit":10}`+"\n"+
				`{"rule":"tenant-quota","tenant":"t2","limit":10}`+"\n"+`{"rule":"tenant-quota","tenant":"t3","limit":-0.5}`+"\n"), "--batch", "1"},
				[]string{":3: limit: must be an integer, got a JSON number"}},
			{[]string{"overrides", "import", "--batch", "1", writeTemp(t, "refused2.jsonl", `{"rule":"gone","tenant":"t1","limit":10}`+"\n"+
				`{"rule":"tenant-quota","tenant":"t2","limit":10}`+"\n"+`{"rule":"also-gone","tenant":"t3","limit":10}`+"\n")},
				[]string{"batch 1 of 3: ", "batch 3 of 3: ", "refused2.jsonl:1.rule", "refused2.jsonl:3.rule", "the cluster refused 2 batches; nothing was imported"}},
		} {
			t.Run(strings.Join(tt.args[:2], " "), func(t *testing.T) {
				code, stdout, stderr := run(tt.args...)
				if code != exitUsage {
					t.Errorf("%v: exit %d, stdout %q, stderr %q; want %d", tt.args, code, stdout, stderr, exitUsage)
				}
				for _, w := range tt.want {
					if !strings.Contains(stderr, w) {
						t.Errorf("%v: stderr\n%s\nlacks %q", tt.args, stderr, w)
					}
				}
			})
		}
		if _, v := list("csv"); !strings.Contains(v, "overrides version 2, 3 in the cluster") {
			t.Errorf("after refused imports and puts: %s", v)
		}
	})
}

// TestOverridesAnchorTenants: a tenant's own cycle, set with
// --anchor-day and --time-zone or imported from CSV, is listed, exported
// and imported again unchanged; an anchor on a rule counted in minutes,
// or outside 1–31, or in an unknown zone, is refused naming the field.
func TestOverridesAnchorTenants(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a coordinator")
	}
	tc := startTestCluster(t, "c1", "eu", "")
	run := func(args ...string) (int, string, string) {
		t.Helper()
		return runIn(t, nil, append(args, "--coordinator", tc.addr)...)
	}
	monthly := "  - name: monthly\n    scope: tenant\n    algorithm: fixed_window\n    limit: 100000\n    period: month\n    intent: quota\n"
	if code, _, stderr := run("rules", "put", writeTemp(t, "rules.yaml", "rules:\n"+monthly+ruleText("per-minute"))); code != exitOK {
		t.Fatalf("rules put: %s", stderr)
	}
	if code, stdout, stderr := run("overrides", "put", "monthly", "acme", "--anchor-day", "17", "--time-zone", "America/New_York"); code != exitOK {
		t.Fatalf("put: exit %d, %s%s", code, stdout, stderr)
	}
	signups := writeTemp(t, "signups.csv", "rule,tenant,anchor_day,time_zone\nmonthly,globex,31,\nmonthly,initech,5,Asia/Tokyo\n")
	if code, stdout, stderr := run("overrides", "import", signups); code != exitOK {
		t.Fatalf("import: exit %d, %s%s", code, stdout, stderr)
	}
	code, table, stderr := run("overrides", "list")
	if code != exitOK || !strings.Contains(table, "day 17 America/New_York") || !strings.Contains(table, "day 5 Asia/Tokyo") {
		t.Fatalf("list: exit %d\n%s%s", code, table, stderr)
	}
	for _, format := range []string{"csv", "jsonl"} {
		_, before, _ := run("overrides", "list", "--format", format)
		code, stdout, stderr := run("overrides", "import", "--format", format, writeTemp(t, "exported", before))
		if code != exitOK || !strings.Contains(stdout, "nothing changed") {
			t.Errorf("%s: import of what list printed: exit %d, stdout %q, stderr %q\n%s", format, code, stdout, stderr, before)
		}
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"overrides", "put", "per-minute", "acme", "--anchor-day", "3"}, "the rule counts none: set its period to day, week or month"},
		{[]string{"overrides", "put", "monthly", "acme", "--anchor-day", "32"}, "anchor_day: must be a day of the month from 1 to 31"},
		{[]string{"overrides", "put", "monthly", "acme", "--time-zone", "Mars/Olympus"}, `unknown time zone "Mars/Olympus"`},
	} {
		code, stdout, stderr := run(tt.args...)
		if code != exitUsage || !strings.Contains(stderr, tt.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %q", tt.args, code, stdout, stderr, tt.want)
		}
	}
}
