package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/allot-io/allot/coordinator/datadir"
	"go.yaml.in/yaml/v3"
)

// githubAnchor is the anchor GitHub gives a Markdown heading.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// runbookSections maps each "## Runbook: …" section of docs/operations.md
// to its text.
func runbookSections(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]string{}
	var anchor string
	for _, line := range strings.Split(string(data), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			anchor = ""
			if strings.HasPrefix(h, "Runbook: ") {
				anchor = githubAnchor(h)
			}
			continue
		}
		if anchor != "" {
			sections[anchor] += line + "\n"
		}
	}
	return sections
}

// TestAlertRunbooks: every alert's runbook_url is a "Runbook:" section of
// docs/operations.md that names the alert, and every runbook section an
// error message points to exists.
func TestAlertRunbooks(t *testing.T) {
	sections := runbookSections(t)
	raw, err := os.ReadFile("../../deploy/prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	const prefix = "https://github.com/allot-io/allot/blob/main/docs/operations.md#"
	alerts := 0
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			alerts++
			url := r.Annotations["runbook_url"]
			anchor, ok := strings.CutPrefix(url, prefix)
			if !ok || !strings.HasPrefix(anchor, "runbook-") {
				t.Errorf("%s: runbook_url %q is not a runbook section of docs/operations.md", r.Alert, url)
				continue
			}
			text, ok := sections[anchor]
			if !ok {
				t.Errorf("%s: docs/operations.md has no section #%s", r.Alert, anchor)
				continue
			}
			if !strings.Contains(text, "`"+r.Alert+"`") {
				t.Errorf("%s: section #%s does not name the alert", r.Alert, anchor)
			}
		}
	}
	if alerts == 0 {
		t.Fatal("no alerts read")
	}
	for _, ref := range []string{datadir.RunbookCorrupt, datadir.RunbookLostDisk, datadir.RunbookQuorum, datadir.RunbookDiskFull} {
		anchor, ok := strings.CutPrefix(ref, "docs/operations.md#")
		if _, found := sections[anchor]; !ok || !found {
			t.Errorf("an error points to %s, which docs/operations.md does not have", ref)
		}
	}
	// Every link to a runbook section inside the doc resolves.
	data, _ := os.ReadFile("../../docs/operations.md")
	for _, m := range regexp.MustCompile(`\]\(#(runbook-[a-z0-9-]+)\)`).FindAllStringSubmatch(string(data), -1) {
		if _, ok := sections[m[1]]; !ok {
			t.Errorf("docs/operations.md links to #%s, which it does not have", m[1])
		}
	}
}
