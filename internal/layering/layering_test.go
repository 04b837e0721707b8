package layering

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/allot-io/allot"

// pkg is what go list -json says of one package.
type pkg struct {
	ImportPath string
	Standard   bool
	Imports    []string
	Deps       []string
}

// list runs go list over the module once and indexes every package it or
// its dependencies name.
func list(t *testing.T) map[string]*pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Standard,Imports,Deps", module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	pkgs := map[string]*pkg{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decoding go list: %v", err)
		}
		pkgs[p.ImportPath] = &p
	}
	return pkgs
}

// entries returns the forbidden packages among deps that path, or an
// allowed package it depends on, imports directly: where each forbidden
// subtree comes in, not every package inside it.
func entries(pkgs map[string]*pkg, path string, deps []string, forbidden func(string) bool) []string {
	var out []string
	for _, d := range deps {
		if !forbidden(d) {
			continue
		}
		for _, q := range append([]string{path}, deps...) {
			if q != path && forbidden(q) {
				continue
			}
			if p := pkgs[q]; p != nil && slices.Contains(p.Imports, d) {
				out = append(out, d)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// chain finds an import path from 'from' to 'to' for the failure message.
func chain(pkgs map[string]*pkg, from, to string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == to {
			var path []string
			for p := cur; p != ""; p = prev[p] {
				path = append(path, short(p))
			}
			slices.Reverse(path)
			return path
		}
		p := pkgs[cur]
		if p == nil {
			continue
		}
		for _, imp := range p.Imports {
			if _, seen := prev[imp]; !seen {
				prev[imp] = cur
				queue = append(queue, imp)
			}
		}
	}
	return []string{short(from), "…", short(to)}
}

func short(path string) string {
	if path == module {
		return "."
	}
	return strings.TrimPrefix(path, module+"/")
}

// ours reports whether path is in this module.
func ours(path string) bool { return path == module || strings.HasPrefix(path, module+"/") }

// under reports whether path is dir or below it (dir relative to the
// module).
func under(path, dir string) bool {
	full := module + "/" + dir
	return path == full || strings.HasPrefix(path, full+"/")
}

func TestImportRules(t *testing.T) {
	pkgs := list(t)
	std := func(dep string) bool { return pkgs[dep] != nil && pkgs[dep].Standard }
	tests := []struct {
		name string
		// applies picks the packages the rule is about.
		applies func(path string) bool
		// forbidden says whether a dependency breaks the rule.
		forbidden func(dep string) bool
		// direct limits the rule to the package's own imports, for
		// what it may reach through another package but must not use
		// itself.
		direct bool
	}{{
		name:      "algo is a leaf: the standard library only",
		applies:   func(p string) bool { return p == module+"/algo" },
		forbidden: func(d string) bool { return !std(d) },
	}, {
		name:    "lease is a leaf: the standard library and algo only",
		applies: func(p string) bool { return p == module+"/lease" },
		forbidden: func(d string) bool {
			return !std(d) && d != module+"/algo"
		},
	}, {
		// The ledger's vocabulary is shared by the state machine, the
		// sink, billing and the CLI: a leaf, so that naming a ledger
		// line links neither the wire nor the database.
		name:      "ledger is a leaf: the standard library only",
		applies:   func(p string) bool { return p == module+"/ledger" },
		forbidden: func(d string) bool { return !std(d) },
	}, {
		name:    "the rule model has no wire types",
		applies: func(p string) bool { return under(p, "lease") && !strings.HasSuffix(p, "test") },
		forbidden: func(d string) bool {
			return under(d, "proto") || strings.HasPrefix(d, "google.golang.org/protobuf") ||
				strings.HasPrefix(d, "google.golang.org/grpc")
		},
	}, {
		name:      "the gateway side links nothing of the coordinator",
		applies:   func(p string) bool { return under(p, "agent") },
		forbidden: func(d string) bool { return under(d, "coordinator") },
	}, {
		name:    "the decision core links none of the servers around it",
		applies: func(p string) bool { return p == module+"/agent" },
		forbidden: func(d string) bool {
			return under(d, "agent") || under(d, "cmd") || under(d, "tools") || under(d, "sim") ||
				strings.HasPrefix(d, "github.com/hashicorp/raft")
		},
	}, {
		name:      "client/retry is a client library with no Allot imports",
		applies:   func(p string) bool { return p == module+"/client/retry" },
		forbidden: ours,
	}, {
		name:      "the replicated state links nothing of Raft",
		applies:   func(p string) bool { return p == module+"/coordinator/internal/state" },
		forbidden: func(d string) bool { return strings.HasPrefix(d, "github.com/hashicorp/") },
	}, {
		// The wire messages it stores come with their services' stubs
		// (package proto holds both), so gRPC is linked; the state must
		// not use it, nor the network, itself.
		name:    "the replicated state calls no network",
		applies: func(p string) bool { return p == module+"/coordinator/internal/state" },
		forbidden: func(d string) bool {
			return d == "net" || strings.HasPrefix(d, "net/") || strings.HasPrefix(d, "google.golang.org/grpc")
		},
		direct: true,
	}, {
		// The simulator's figures speak for the production allocator
		// because it runs the leader's code (coordinator/allocator, and
		// slot moves by coordinator/internal/slotmove); it must run it
		// without the cluster around it, and so must the allocator.
		name: "the allocator and the simulator link no Raft, bbolt or PostgreSQL driver",
		applies: func(p string) bool {
			return under(p, "sim") || under(p, "coordinator/allocator") || under(p, "coordinator/internal/slotmove")
		},
		forbidden: func(d string) bool {
			return strings.HasPrefix(d, "github.com/hashicorp/raft") || strings.HasPrefix(d, "go.etcd.io/bbolt") ||
				strings.HasPrefix(d, "github.com/jackc/pgx")
		},
	}, {
		// RLQS is a front door, as agent/envoy is the agent's: it sees
		// the member through its Intake (rules, settings, the way a
		// stream's reports go), so that a stream's report takes the path
		// an agent's does and nothing else of the cluster is in reach.
		name:    "the RLQS front door links none of the coordinator around it",
		applies: func(p string) bool { return under(p, "coordinator/rlqs") },
		forbidden: func(d string) bool {
			return (under(d, "coordinator") && !under(d, "coordinator/rlqs")) || strings.HasPrefix(d, "github.com/hashicorp/raft")
		},
	}, {
		// The coordinator's parts reach Raft and the allocator only
		// through what the member hands them (shardgroup.Member, the
		// batcher's apply, the leadership check's verify), so each can be
		// read, and tested, without a cluster.
		name: "the coordinator's parts link no Raft, and no allocator",
		applies: func(p string) bool {
			return under(p, "coordinator/internal/shardgroup") || under(p, "coordinator/internal/intake") ||
				under(p, "coordinator/internal/authz")
		},
		forbidden: func(d string) bool {
			return strings.HasPrefix(d, "github.com/hashicorp/raft") || under(d, "coordinator/allocator")
		},
	}, {
		name:      "who may call what reads no replicated state",
		applies:   func(p string) bool { return under(p, "coordinator/internal/authz") },
		forbidden: func(d string) bool { return under(d, "coordinator/internal/fsm") },
	}, {
		name:      "raftnet wraps Raft's network with no Allot imports",
		applies:   func(p string) bool { return p == module+"/coordinator/internal/raftnet" },
		forbidden: ours,
	}, {
		name:    "billing arithmetic is pure: no wire, no Raft",
		applies: func(p string) bool { return p == module+"/billing" },
		forbidden: func(d string) bool {
			return under(d, "proto") || strings.HasPrefix(d, "google.golang.org/") ||
				strings.HasPrefix(d, "github.com/hashicorp/raft")
		},
	}, {
		// A gateway embedding the agent passes its own TracerProvider,
		// or none: the libraries use the OpenTelemetry API, and only the
		// allot command builds a provider and exports.
		name: "only the command links the OpenTelemetry SDK and exporters",
		applies: func(p string) bool {
			return ours(p) && !under(p, "cmd") && !under(p, "internal/tracing/exporter")
		},
		forbidden: func(d string) bool {
			return strings.HasPrefix(d, "go.opentelemetry.io/otel/sdk") || strings.HasPrefix(d, "go.opentelemetry.io/otel/exporters")
		},
	}, {
		// A gateway embedding the agent sees none of the hooks by which
		// the simulator drives agents in virtual time: they live in
		// internal/agentdrive, which the agent implements and the
		// simulator alone uses.
		name: "only the simulator drives an agent by hand",
		applies: func(p string) bool {
			return ours(p) && p != module+"/agent" && !under(p, "sim") && p != module+"/internal/agentdrive"
		},
		forbidden: func(d string) bool { return d == module+"/internal/agentdrive" },
		direct:    true,
	}, {
		name:    "libraries never import a command or a harness",
		applies: func(p string) bool { return ours(p) && !under(p, "cmd") && !under(p, "tools") },
		forbidden: func(d string) bool {
			return under(d, "cmd") || under(d, "tools")
		},
	}, {
		// cmd/ holds what ships; the harnesses that run it live in
		// tools/, so the binary never links what only measures it.
		name:      "the shipped command links no harness",
		applies:   func(p string) bool { return under(p, "cmd") },
		forbidden: func(d string) bool { return under(d, "tools") },
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			matched := 0
			for path, p := range pkgs {
				if !ours(path) || !tt.applies(path) {
					continue
				}
				matched++
				deps := p.Deps
				if tt.direct {
					deps = p.Imports
				}
				for _, dep := range entries(pkgs, path, deps, tt.forbidden) {
					t.Errorf("%s depends on %s: %s", short(path), short(dep), strings.Join(chain(pkgs, path, dep), " → "))
				}
			}
			if matched == 0 {
				t.Fatalf("the rule names no package: the layout changed and the rule must follow it")
			}
		})
	}
}

// TestCommandsShip checks that cmd/ holds only what ships: the allot
// command and packages of its own. A harness, a benchmark or a load
// generator goes in tools/, which make runs and nothing imports.
func TestCommandsShip(t *testing.T) {
	for path := range list(t) {
		if under(path, "cmd") && !under(path, "cmd/allot") {
			t.Errorf("%s is under cmd/, which holds only cmd/allot and its own packages: a harness goes in tools/", short(path))
		}
	}
}
