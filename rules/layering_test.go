package rules

import (
	"go/build"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/allot-io/allot"

// TestLayering keeps the rule model pure: rules and what it imports
// link no wire types, and lease, whose arithmetic and vocabulary
// (intents, fail modes) the model is built on, imports no other Allot
// package, so that the model may import it and never the other way
// round. The wire conversion is proto/rulespb's.
func TestLayering(t *testing.T) {
	_, here, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(here), "..")
	deps := func(pkg string) []string {
		seen := map[string]bool{}
		var out []string
		var walk func(string)
		walk = func(p string) {
			bp, err := build.ImportDir(filepath.Join(root, strings.TrimPrefix(p, module)), 0)
			if err != nil {
				t.Fatalf("reading %s: %v", p, err)
			}
			for _, imp := range bp.Imports {
				if seen[imp] {
					continue
				}
				seen[imp] = true
				out = append(out, imp)
				if strings.HasPrefix(imp, module+"/") {
					walk(imp)
				}
			}
		}
		walk(pkg)
		slices.Sort(out)
		return out
	}
	for _, pkg := range []string{module + "/lease", module + "/rules", module + "/rules/envoyconf"} {
		for _, imp := range deps(pkg) {
			switch {
			case imp == module+"/proto", strings.HasPrefix(imp, module+"/proto/"),
				strings.HasPrefix(imp, "google.golang.org/protobuf"), strings.HasPrefix(imp, "google.golang.org/grpc"):
				t.Errorf("%s imports %s: the rule model and lease have no wire types (convert with proto/rulespb)", pkg, imp)
			case pkg == module+"/lease" && strings.HasPrefix(imp, module+"/"):
				t.Errorf("lease imports %s: it is the leaf the rule model builds on, and imports no Allot package", imp)
			}
		}
	}
}
