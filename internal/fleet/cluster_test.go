package fleet

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/internal/auth"
)

// TestNewOptions lays out clusters without starting them: zero sidecars,
// no rules file, and agent tokens for agents the caller runs; and bad
// options refused with ErrOptions and the field named.
func TestNewOptions(t *testing.T) {
	t.Run("zero sidecars, secured, an agent token for gw-*", func(t *testing.T) {
		dir := t.TempDir()
		cl, err := New(Options{Bin: "/bin/allot", Dir: dir, Secure: true, AgentTokens: map[string]string{"gateways": "gw-*"},
			CoordinatorArgs: []string{"--region", "demo"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(cl.Sidecars) != 0 || len(cl.Coords) != 3 {
			t.Fatalf("%d coordinators and %d sidecars, want 3 and 0", len(cl.Coords), len(cl.Sidecars))
		}
		if got := cl.GRPCAddrs(); len(got) != 3 || got[0] != cl.Coords[0].GRPC {
			t.Errorf("GRPCAddrs %q", got)
		}
		if _, err := os.Stat(filepath.Join(dir, "logs")); err != nil {
			t.Errorf("no log directory: %v", err)
		}
		c := cl.Creds
		data, err := os.ReadFile(c.TokensFile)
		if err != nil {
			t.Fatal(err)
		}
		tokens, err := auth.ParseTokens(c.TokensFile, data)
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			file        string
			role        auth.Role
			may, mayNot string // a node ID it may report as, and one it may not
		}{
			{file: c.Admin, role: auth.Admin},
			{file: c.Reader, role: auth.Reader},
			{file: c.Agents["gateways"], role: auth.Agent, may: "gw-7", mayNot: "c1"},
		} {
			fi, err := os.Stat(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("%s: mode %v, want 0600", tc.file, fi.Mode().Perm())
			}
			g, ok := tokens.Lookup(Token(tc.file))
			if !ok || g.Role != tc.role {
				t.Errorf("%s: grant %+v, found %v; want role %v", tc.file, g, ok, tc.role)
			}
			if tc.may != "" && (!g.MayReportAs(tc.may, "demo") || g.MayReportAs(tc.mayNot, "demo")) {
				t.Errorf("%s: grant %+v; want %s and not %s", tc.file, g, tc.may, tc.mayNot)
			}
		}
		for _, co := range cl.Coords {
			args := strings.Join(co.Args, " ")
			for _, want := range []string{"--cert " + filepath.Join(c.Dir, co.ID+".pem"), "--key " + filepath.Join(c.Dir, co.ID+"-key.pem"),
				"--region demo", "--bootstrap-expect 3", "--join " + strings.Join(cl.GRPCAddrs(), ",")} {
				if !strings.Contains(args, want) {
					t.Errorf("%s's flags %q lack %q", co.ID, args, want)
				}
			}
			if slices.Contains(co.Args, "--rules") {
				t.Errorf("%s: --rules without a RulesPath: %q", co.ID, args)
			}
		}
	})
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"no binary", Options{}, "Bin"},
		{"negative sidecars", Options{Sidecars: -1}, "Sidecars -1"},
		{"agent tokens insecure", Options{AgentTokens: map[string]string{"gw": "gw-*"}}, "AgentTokens without Secure"},
		{"agent token named as a sidecar's", Options{Sidecars: 2, Secure: true, AgentTokens: map[string]string{"gw2": "gw-*"}}, `AgentTokens["gw2"]`},
		{"agent token named admin", Options{Secure: true, AgentTokens: map[string]string{"admin": "gw-*"}}, `AgentTokens["admin"]`},
		{"agent token with a path", Options{Secure: true, AgentTokens: map[string]string{"../x": "gw-*"}}, `AgentTokens["../x"]`},
		{"agent token bound to nothing", Options{Secure: true, AgentTokens: map[string]string{"gw": " "}}, `AgentTokens["gw"]: no node IDs`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			if tc.want != "Bin" {
				o.Bin, o.Dir = "/bin/allot", t.TempDir()
			}
			_, err := New(o)
			if !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v; want ErrOptions naming %q", err, tc.want)
			}
		})
	}
}

// TestNewSinkFlags passes the ledger sink's flags to every coordinator,
// and none of them when the options leave them out.
func TestNewSinkFlags(t *testing.T) {
	for _, tc := range []struct {
		name        string
		o           Options
		want, never []string
	}{
		{"sink, batch and interval", Options{Sidecars: 1, LedgerSinkFile: "/run/sink.dsn", LedgerExportBatch: 500, LedgerExportInterval: 500 * time.Millisecond},
			[]string{"--ledger-sink-file /run/sink.dsn", "--ledger-export-batch 500", "--ledger-export-interval 500ms"}, nil},
		{"sink alone", Options{LedgerSinkFile: "/run/sink.dsn"},
			[]string{"--ledger-sink-file /run/sink.dsn"}, []string{"--ledger-export-batch", "--ledger-export-interval"}},
		{"no sink", Options{}, nil, []string{"--ledger-sink", "--ledger-export-batch", "--ledger-export-interval"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			o.Bin, o.Dir = "/bin/allot", t.TempDir()
			cl, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			for _, co := range cl.Coords {
				args := strings.Join(co.Args, " ")
				for _, w := range tc.want {
					if !strings.Contains(args, w) {
						t.Errorf("%s's flags %q lack %q", co.ID, args, w)
					}
				}
				for _, n := range tc.never {
					if strings.Contains(args, n) {
						t.Errorf("%s's flags %q have %q", co.ID, args, n)
					}
				}
			}
			for _, s := range cl.Sidecars {
				if args := strings.Join(s.Args, " "); strings.Contains(args, "--ledger") {
					t.Errorf("sidecar %s got a ledger flag: %q", s.ID, args)
				}
			}
		})
	}
}

// TestMemberStatusJSON decodes a status as the coordinator writes it
// (protobuf JSON: 64-bit integers quoted), and refuses a bad index.
func TestMemberStatusJSON(t *testing.T) {
	var st MemberStatus
	in := `{"id":"c2","state":"Follower","leader_id":"c1","leader_grpc_address":"127.0.0.1:7400","term":"4","applied_index":"1234","commit_index":1235,"cluster_id":"7f3a",
		"ledger":{"lines":"11776","sink":true,"exported_lines":"147340","exported_batches":"295","exported_through_window":"2026-12-02T03:03:00Z"},
		"members":[{"id":"c1","voter":true},{"id":"c2","voter":true},{"id":"c3","voter":false}]}`
	if err := json.Unmarshal([]byte(in), &st); err != nil {
		t.Fatal(err)
	}
	if st.Term != 4 || st.AppliedIndex != 1234 || st.CommitIndex != 1235 || st.Voters() != 2 || st.LeaderID != "c1" || st.LeaderGRPC != "127.0.0.1:7400" || st.ClusterID != "7f3a" ||
		st.Ledger.Lines != 11776 || !st.Ledger.Sink || st.Ledger.ExportedLines != 147340 || st.Ledger.ExportedBatches != 295 || st.Ledger.ExportedThroughWindow != "2026-12-02T03:03:00Z" {
		t.Errorf("decoded %+v, voters %d", st, st.Voters())
	}
	if err := json.Unmarshal([]byte(`{"commit_index":"-1"}`), &st); err == nil {
		t.Error("commit_index -1 decoded")
	}
}
