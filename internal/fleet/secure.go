package fleet

import (
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/allot-io/allot/internal/auth"
)

// Creds are a secured cluster's credentials, made by New in Dir/pki: a
// throwaway CA, a member certificate per coordinator (for 127.0.0.1 and
// localhost), and tokens in files: an admin's, a reader's, one per
// sidecar bound to its node ID alone, as a deployment issuing a token per
// gateway would, and Options.AgentTokens.
type Creds struct {
	Dir    string
	CA     string
	Admin  string // the admin token's file
	Reader string // the reader token's file
	// Agents are the agent tokens' files: each sidecar's by its node
	// ID, and each of Options.AgentTokens by its name.
	Agents     map[string]string
	TokensFile string // the coordinators' --auth-tokens
	members    map[string]auth.Issued
}

// Token reads a token file.
func Token(path string) string {
	b, _ := os.ReadFile(path)
	return strings.TrimSpace(string(b))
}

// ClientArgs are the flags an `allot` client command takes to call the
// cluster as an admin.
func (c *Creds) ClientArgs() []string {
	return []string{"--ca", c.CA, "--token-file", c.Admin}
}

// newCreds issues the credentials for coordinators coords, sidecars, and
// the more agent tokens (name → the node IDs it may report as).
func newCreds(dir string, coords, sidecars []string, agents map[string]string) (*Creds, error) {
	specs := []auth.TokenSpec{{Name: "admin", Role: auth.Admin}, {Name: "reader", Role: auth.Reader}}
	for _, id := range sidecars {
		specs = append(specs, auth.TokenSpec{Name: id, Role: auth.Agent, Nodes: id})
	}
	for _, name := range slices.Sorted(maps.Keys(agents)) {
		nodes := agents[name]
		taken := slices.ContainsFunc(specs, func(s auth.TokenSpec) bool { return s.Name == name })
		switch {
		case name == "" || strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, "."):
			return nil, fmt.Errorf("%w: AgentTokens[%q]: want a plain name, the token's file name", ErrOptions, name)
		case taken:
			return nil, fmt.Errorf("%w: AgentTokens[%q]: the name of the admin, reader or a sidecar's token", ErrOptions, name)
		case strings.TrimSpace(nodes) == "":
			return nil, fmt.Errorf("%w: AgentTokens[%q]: no node IDs: an agent token must be bound to some", ErrOptions, name)
		}
		specs = append(specs, auth.TokenSpec{Name: name, Role: auth.Agent, Nodes: nodes})
	}
	c := &Creds{Dir: filepath.Join(dir, "pki"), Agents: map[string]string{}, members: map[string]auth.Issued{}}
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("making %s: %w", c.Dir, err)
	}
	ca, err := auth.NewCA(c.Dir, "fleet-ca", "allot.fleet")
	if err != nil {
		return nil, fmt.Errorf("making the CA: %w", err)
	}
	c.CA = ca.File
	for _, id := range coords {
		if c.members[id], err = ca.IssueMember(id); err != nil {
			return nil, fmt.Errorf("issuing %s's member certificate: %w", id, err)
		}
	}
	tokensFile, files, err := auth.IssueTokens(c.Dir, specs...)
	if err != nil {
		return nil, fmt.Errorf("issuing the tokens: %w", err)
	}
	c.TokensFile, c.Admin, c.Reader = tokensFile, files["admin"], files["reader"]
	for _, s := range specs[2:] {
		c.Agents[s.Name] = files[s.Name]
	}
	return c, nil
}

// coordinatorArgs are a member's credential flags: its certificate and
// the CA (mutual TLS on Raft, TLS on gRPC and HTTP), the tokens it
// accepts, and the admin token it presents when it joins.
func (c *Creds) coordinatorArgs(id string) []string {
	m := c.members[id]
	return []string{"--cert", m.CertFile, "--key", m.KeyFile,
		"--ca", c.CA, "--auth-tokens", c.TokensFile, "--token-file", c.Admin}
}

// sidecarArgs are a sidecar's credential flags.
func (c *Creds) sidecarArgs(id string) []string {
	return []string{"--ca", c.CA, "--token-file", c.Agents[id]}
}

// httpClient calls the coordinators' HTTPS endpoints as a reader, and
// the sidecars' plain ones.
func (c *Creds) httpClient(timeout time.Duration) (*http.Client, error) {
	r, err := auth.NewReloader(auth.TLSFiles{CAFile: c.CA}, nil)
	if err != nil {
		return nil, err
	}
	return &http.Client{Timeout: timeout, Transport: &bearer{token: Token(c.Reader),
		next: &http.Transport{TLSClientConfig: r.ClientConfig()}}}, nil
}

// bearer adds a bearer token to requests over TLS.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b *bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme == "https" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return b.next.RoundTrip(r)
}
