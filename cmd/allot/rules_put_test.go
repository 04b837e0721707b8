package main

import (
	"strings"
	"testing"
)

// TestRulesPutSaysWhatStays: a put of a file that leaves out a rule of
// the cluster keeps that rule and says so, naming --replace-all; a put
// that changes nothing keeps the version; and the output of 'rules get',
// edited and put with --replace-all as its header says, deletes the rule
// taken out of it.
func TestRulesPutSaysWhatStays(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a coordinator")
	}
	tc := startTestCluster(t, "c1", "eu", "")
	at := []string{"--coordinator", tc.addr}
	put := func(args ...string) (int, string, string) {
		t.Helper()
		return runIn(t, nil, append(append([]string{"rules", "put"}, args...), at...)...)
	}
	three := writeTemp(t, "three.yaml", "rules:\n"+ruleText("a")+ruleText("b")+ruleText("c"))
	two := writeTemp(t, "two.yaml", "rules:\n"+ruleText("a")+ruleText("b"))
	onlyA := writeTemp(t, "a.yaml", "rules:\n"+strings.Replace(ruleText("a"), "limit: 5", "limit: 6", 1))
	if code, stdout, stderr := put(three); code != exitOK || stdout != "rules version 1 (3 rules): created a, b, c\n" {
		t.Fatalf("put of three rules: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}

	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"the same file again", []string{three}, "rules version 1 kept (3 rules): nothing changed\n"},
		{"a file that leaves a rule out", []string{two},
			"rules version 1 kept (3 rules): nothing changed\n" +
				"kept 1 rule not in " + two + ": c (put --replace-all deletes the rules a file leaves out)\n"},
		{"a change, and rules left out", []string{onlyA},
			"rules version 2 (3 rules): changed a\n" +
				"kept 2 rules not in " + onlyA + ": b, c (put --replace-all deletes the rules a file leaves out)\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := put(tt.args...)
			if code != exitOK || stdout != tt.want {
				t.Errorf("exit %d, stdout %q, stderr %q; want %q", code, stdout, stderr, tt.want)
			}
		})
	}

	// The whole set, as 'rules get' prints it, with c deleted from it.
	code, got, stderr := runIn(t, nil, append([]string{"rules", "get"}, at...)...)
	if code != exitOK || !strings.Contains(got, "# Apply an edited copy with: allot rules put --replace-all FILE\n") {
		t.Fatalf("rules get: exit %d, stderr %q; want a header naming --replace-all:\n%s", code, stderr, got)
	}
	i := strings.Index(got, "  - name: c\n")
	if i < 0 {
		t.Fatalf("rules get printed no rule c:\n%s", got)
	}
	end := strings.Index(got[i+1:], "  - name: ")
	edited := got[:i]
	if end >= 0 {
		edited += got[i+1+end:]
	}
	file := writeTemp(t, "edited.yaml", edited)
	if code, stdout, stderr := put(file, "--replace-all"); code != exitOK || stdout != "rules version 3 (2 rules): deleted c; 2 unchanged\n" {
		t.Errorf("put --replace-all of the edited copy: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, stdout, stderr := put(file, "--replace-all"); code != exitOK || stdout != "rules version 3 kept (2 rules): nothing changed\n" {
		t.Errorf("the same put again: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}
