package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/allot-io/allot/internal/auth"
	"github.com/allot-io/allot/internal/plural"
	"go.yaml.in/yaml/v3"
)

const tokenAbout = `
Makes a new random bearer token and writes it to --out (mode 0600) for
the client that presents it. The coordinators' --auth-tokens file holds
only the token's SHA-256: with --append FILE the entry is added to that
file's tokens: list (the file is created, mode 0600, if it does not
exist; a name already in it is refused); without, it is printed for you
to add. Deploy the same file to every coordinator; they re-read it when
it changes.

To rotate a token, make its successor with --like OLD-NAME, which copies
the old entry's role, nodes, regions and tenant, so that the new token may do
exactly what the old one did. Both are accepted meanwhile: move the
clients to the new token file, then remove the old entry.

  allot token --name gateways-east --role agent --nodes 'gw-east-*' --append tokens.yaml --out gw-east.token
  allot token --name gateways-east-2 --like gateways-east --append tokens.yaml --out gw-east-2.token

A balance token reads one tenant's balance and nothing else
(GET /v1/balance, allot balance): the credential for a customer's
dashboard (docs/billing.md#balance).

  allot token --name dash-acme --role balance --tenant acme --append tokens.yaml --out dash-acme.token`

// tokenDoc is a tokens file entry as allot token writes it, in the order
// the file's documentation lists the fields.
type tokenDoc struct {
	Name    string `yaml:"name"`
	Role    string `yaml:"role"`
	Nodes   string `yaml:"nodes,omitempty"`
	Regions string `yaml:"regions,omitempty"`
	Tenant  string `yaml:"tenant,omitempty"`
	SHA256  string `yaml:"sha256"`
}

func tokenCommand() *Command {
	return &Command{
		Name: "token", Usage: "--name NAME (--role agent|reader|balance|admin [--nodes PATTERN] [--regions PATTERN] [--tenant T] | --like NAME) [--append FILE] --out FILE",
		Short: "make a bearer token for an agent, a reader, a tenant's balance or an admin",
		Long:  tokenAbout, Flags: tokenFlags,
	}
}

func tokenFlags(f *flags) runFunc {
	cmd := f.cmd
	var name, role, nodes, regions, tenant, like, appendTo, out string
	f.StringVar(&name, "name", "", "the token's name, in the coordinators' logs and metrics (required)")
	f.StringVar(&role, "role", "", "agent, reader, balance or admin (required, unless --like)")
	f.StringVar(&nodes, "nodes", "", "agents: the node IDs it may report as, a shell pattern such as gw-*")
	f.StringVar(&regions, "regions", "", "agents, optional: the regions it may report in, a pattern")
	f.StringVar(&tenant, "tenant", "", "balance tokens: the one tenant whose balance it may read")
	f.StringVar(&like, "like", "", "copy role, nodes, regions and tenant from this entry of the --append file (to rotate a token)")
	f.StringVar(&appendTo, "append", "", "add the entry to this tokens file (created with mode 0600 if missing) instead of printing it to add")
	f.StringVar(&out, "out", "", "file to write the token to, created with mode 0600 (required)")
	return func(_ context.Context, e *env, args []string) error {
		if name == "" || out == "" {
			return usagef(cmd, "--name and --out are required")
		}
		var file *tokensFile
		if appendTo != "" {
			var err error
			if file, err = readTokensFile(appendTo); err != nil {
				return &usageError{err: err}
			}
		}
		entry := tokenDoc{Name: name, Role: role, Nodes: nodes, Regions: regions, Tenant: tenant}
		switch {
		case like != "" && (role != "" || nodes != "" || regions != "" || tenant != ""):
			return usagef(cmd, "--like copies --role, --nodes, --regions and --tenant from %q: give either --like or those", like)
		case like != "" && file == nil:
			return usagef(cmd, "--like needs --append FILE, the tokens file that lists %q", like)
		case like != "":
			g, _, ok := file.tokens.Named(like)
			if !ok {
				return usagef(cmd, "--like %q: %s has no such entry (it lists %s)", like, file.path, strings.Join(file.tokens.Names(), ", "))
			}
			entry.Role, entry.Nodes, entry.Regions, entry.Tenant = g.Role.String(), g.NodeGlob, g.RegionGlob, g.Tenant
		case role == "":
			return usagef(cmd, "--role (or --like NAME) is required")
		}
		tok := auth.NewToken()
		entry.SHA256 = auth.TokenSHA256(tok)
		// The same checks the coordinators make, before anything is written.
		doc, err := entryFile(entry)
		if err != nil {
			return err
		}
		if _, err := auth.ParseTokens("the new entry", doc); err != nil {
			return &usageError{err: err}
		}
		var updated []byte
		if file != nil {
			if updated, err = file.with(entry); err != nil {
				return &usageError{err: err}
			}
		}
		if err := writeNewFile(out, []byte(tok+"\n")); err != nil {
			return fmt.Errorf("writing the token: %w", err)
		}
		if file == nil {
			fmt.Fprintf(e.stdout, "# token written to %s; add this entry under the tokens: list of the coordinators' --auth-tokens file (or run with --append FILE):\n%s", out, doc)
			return nil
		}
		if err := file.replace(updated); err != nil {
			// The token would be accepted nowhere: do not leave it behind.
			if rmErr := os.Remove(out); rmErr != nil {
				err = errors.Join(err, fmt.Errorf("removing %s: %w", out, rmErr))
			}
			return err
		}
		item, err := entryItem(entry, "")
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "# token written to %s\n# entry added to %s (%s); deploy that file to every coordinator:\n%s",
			out, file.path, plural.Count(file.tokens.Len()+1, "token"), item)
		return nil
	}
}

// entryFile is a tokens file holding entry alone, as printed without
// --append.
func entryFile(entry tokenDoc) ([]byte, error) {
	item, err := entryItem(entry, "  ")
	if err != nil {
		return nil, err
	}
	return append([]byte("tokens:\n"), item...), nil
}

// entryItem is entry as a block sequence item, every line indented by
// indent.
func entryItem(entry tokenDoc, indent string) ([]byte, error) {
	var b strings.Builder
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode([]tokenDoc{entry}); err != nil {
		return nil, fmt.Errorf("encoding the entry: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encoding the entry: %w", err)
	}
	lines := strings.SplitAfter(b.String(), "\n")
	var out strings.Builder
	for _, l := range lines {
		if l != "" {
			out.WriteString(indent + l)
		}
	}
	return []byte(out.String()), nil
}

// writeNewFile creates path, which must not exist, with mode 0600.
func writeNewFile(path string, data []byte) error {
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := fh.Write(data); err != nil {
		fh.Close()
		return err
	}
	return fh.Close()
}
