package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/allot-io/allot/internal/plural"
	"github.com/allot-io/allot/internal/strictyaml"
	"github.com/allot-io/allot/rules"
	"go.yaml.in/yaml/v3"
)

const rulesValidateAbout = `
Checks a rules file offline, exactly as the cluster and the agent would
check it. Prints "ok: N rules", or every problem as file:line: field:
message and exits with 2.

With --region R, also warns of each rule that will not be enforced in
region R (its regions give R no share), as 'allot rules put' does
against a cluster of that region; a warning is not an error.`

func rulesValidateFlags(f *flags) runFunc {
	cmd := f.cmd
	var region string
	f.StringVar(&region, "region", "", "warn of the rules that region R will not enforce (a coordinator's --region)")
	return func(_ context.Context, e *env, args []string) error {
		file, err := exactlyOne(cmd, "rules file", args)
		if err != nil {
			return err
		}
		list, err := loadRules(e.stderr, file)
		if err != nil {
			return err
		}
		var warnings []string
		if region != "" {
			warnings = regionWarnings(file, list, region)
		}
		for _, w := range warnings {
			fmt.Fprintf(e.stderr, "warning: %s\n", w)
		}
		if len(warnings) > 0 {
			fmt.Fprintf(e.stdout, "ok: %s, %d not enforced in region %s\n", plural.Count(len(list), "rule"), len(warnings), region)
			return nil
		}
		fmt.Fprintf(e.stdout, "ok: %s\n", plural.Count(len(list), "rule"))
		return nil
	}
}

// regionWarnings says, one line per rule, which rules of a file will not
// be enforced in region: those that divide their limit among regions and
// give it no share. The region's coordinators hold no pool for such a
// rule and its agents skip it (docs/rules.md, "Regions"), so nothing
// refuses a request under it there. Each line is "file:line:
// rules[NAME].regions: ...", as validation problems are.
func regionWarnings(path string, list []rules.Rule, region string) []string {
	lines := regionsLines(path)
	var out []string
	for _, r := range list {
		if !r.LeavesOut(region) {
			continue
		}
		loc := path
		if l := lines[r.Name]; l > 0 {
			loc += ":" + strconv.Itoa(l)
		}
		out = append(out, fmt.Sprintf("%s: rules[%s].regions: not enforced in region %s, which it gives no share (it divides its limit among %s): requests there pass it unchecked; add %s to regions, or put the rule on the clusters of those regions only",
			loc, r.Name, region, strings.Join(slices.Sorted(maps.Keys(r.Regions)), ", "), region))
	}
	return out
}

// regionsLines finds the line of each rule's regions field in the file at
// path, by rule name; nil when the file cannot be read again (the
// warnings then name the file alone).
func regionsLines(path string) map[string]int {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	root, err := strictyaml.Parse(data)
	if err != nil || root == nil || len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return nil
	}
	top := root.Content[0]
	var list *yaml.Node
	for i := 0; i+1 < len(top.Content); i += 2 {
		if top.Content[i].Value == "rules" {
			list = top.Content[i+1]
		}
	}
	if list == nil || list.Kind != yaml.SequenceNode {
		return nil
	}
	out := map[string]int{}
	for _, item := range list.Content {
		var name string
		line := item.Line
		for i := 0; item.Kind == yaml.MappingNode && i+1 < len(item.Content); i += 2 {
			switch k := item.Content[i]; k.Value {
			case "name":
				name = item.Content[i+1].Value
			case "regions":
				line = k.Line
			}
		}
		out[name] = line
	}
	return out
}
