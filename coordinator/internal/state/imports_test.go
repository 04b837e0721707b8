package state

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// allowedImports are what the state may import: the standard library
// (less what reads a clock or is random, below), the protocol's messages,
// the rule model, the ledger's vocabulary and the slot function,
// protobuf's encoding, and the B-tree.
var allowedImports = map[string]bool{
	"github.com/allot-io/allot/rules":                          true,
	"github.com/allot-io/allot/ledger":                         true, // the ledger's key, line and position: no clock, no state
	"github.com/allot-io/allot/internal/shard":                 true, // the slot of a tenant: a pure function
	"github.com/allot-io/allot/proto":                          true,
	"github.com/allot-io/allot/proto/rulespb":                  true,
	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb": true,
	"github.com/google/btree":                                  true,
	"google.golang.org/protobuf/proto":                         true,
	"google.golang.org/protobuf/encoding/protodelim":           true,
	"google.golang.org/protobuf/encoding/protowire":            true,
}

// forbiddenStd are standard packages the state must not use: randomness
// and the network would make replicas diverge.
var forbiddenStd = map[string]bool{"math/rand": true, "math/rand/v2": true, "crypto/rand": true, "net": true, "os": true}

// clockReads are the functions of package time that read the clock or
// wait on it.
var clockReads = map[string]bool{"Now": true, "Since": true, "Until": true, "Sleep": true, "After": true, "AfterFunc": true, "Tick": true, "NewTimer": true, "NewTicker": true}

// TestImports: the state's files (tests aside) import neither Raft nor
// anything outside a short list, and never read the clock: every replica
// must reach the same state from the same log.
func TestImports(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		timeName := ""
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			std := !strings.Contains(strings.Split(path, "/")[0], ".")
			switch {
			case path == "time":
				timeName = "time"
				if imp.Name != nil {
					timeName = imp.Name.Name
				}
			case std && forbiddenStd[path], !std && !allowedImports[path]:
				t.Errorf("%s: imports %s; the replicated state must not (see doc.go)", fset.Position(imp.Pos()), path)
			}
		}
		if timeName == "" {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == timeName && clockReads[sel.Sel.Name] {
					t.Errorf("%s: time.%s reads the clock; the time a command needs comes in the command", fset.Position(sel.Pos()), sel.Sel.Name)
				}
			}
			return true
		})
	}
	if checked == 0 {
		t.Fatal("no files checked")
	}
}
