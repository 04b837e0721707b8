package main

import (
	"context"
	"fmt"
	"os"

	"github.com/allot-io/allot/coordinator/auth"
	"go.yaml.in/yaml/v3"
)

const tokenAbout = `
Makes a new random bearer token: writes it to --out (mode 0600) for the
client that presents it, and prints the entry to add to the coordinators'
--auth-tokens file, which holds only the token's SHA-256. To rotate a
token, add the new entry next to the old one, move the clients to the new
token file, then remove the old entry: both are accepted meanwhile, and
the coordinators re-read the file when it changes.

  allot token --name gateways-east --role agent --nodes 'gw-east-*' --out gw-east.token`

func runToken(_ context.Context, e *env) error {
	f := newFlags(e, "token", "--name NAME --role agent|reader|admin [--nodes PATTERN] [--regions PATTERN] --out FILE", tokenAbout)
	var name, role, nodes, regions, out string
	f.StringVar(&name, "name", "", "the token's name, in the coordinators' logs and metrics (required)")
	f.StringVar(&role, "role", "", "agent, reader or admin (required)")
	f.StringVar(&nodes, "nodes", "", "agents: the node IDs it may report as, a shell pattern such as gw-*")
	f.StringVar(&regions, "regions", "", "agents, optional: the regions it may report in, a pattern")
	f.StringVar(&out, "out", "", "file to write the token to, created with mode 0600 (required)")
	if err := f.parse(e); err != nil {
		return err
	}
	if err := f.noArgs(); err != nil {
		return err
	}
	if name == "" || role == "" || out == "" {
		return usagef("token", "--name, --role and --out are required")
	}
	tok := auth.NewToken()
	entry := map[string]string{"name": name, "role": role, "sha256": auth.TokenSHA256(tok)}
	if nodes != "" {
		entry["nodes"] = nodes
	}
	if regions != "" {
		entry["regions"] = regions
	}
	doc, err := yaml.Marshal(map[string]any{"tokens": []map[string]string{entry}})
	if err != nil {
		return err
	}
	// The same checks the coordinators make, before anything is written.
	if _, err := auth.ParseTokens("the new entry", doc); err != nil {
		return &usageError{err: err}
	}
	fh, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("writing the token: %w", err)
	}
	if _, err := fmt.Fprintln(fh, tok); err != nil {
		fh.Close()
		return fmt.Errorf("writing the token: %w", err)
	}
	if err := fh.Close(); err != nil {
		return fmt.Errorf("writing the token: %w", err)
	}
	fmt.Fprintf(e.stdout, "# token written to %s; add this entry to the coordinators' --auth-tokens file:\n%s", out, doc)
	return nil
}
