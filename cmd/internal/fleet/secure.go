package fleet

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/allot-io/allot/internal/auth"
)

// Creds are a secured cluster's credentials, made by New in Dir/pki: a
// throwaway CA, a member certificate per coordinator, and tokens in
// files: an admin's, a reader's, and one per sidecar bound to its node ID
// alone, as a deployment issuing a token per gateway would.
type Creds struct {
	Dir        string
	CA         string
	Admin      string            // the admin token's file
	Reader     string            // the reader token's file
	Agents     map[string]string // each sidecar's token file, by node ID
	TokensFile string            // the coordinators' --auth-tokens
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

// newCreds issues the credentials for coordinators coords and sidecars.
func newCreds(dir string, coords, sidecars []string) (*Creds, error) {
	c := &Creds{Dir: filepath.Join(dir, "pki"), Agents: map[string]string{}}
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return nil, err
	}
	ca, err := auth.NewCA(c.Dir, "fleet-ca", "allot.fleet")
	if err != nil {
		return nil, err
	}
	c.CA = ca.File
	for _, id := range coords {
		if _, err := ca.IssueMember(id); err != nil {
			return nil, err
		}
	}
	specs := []auth.TokenSpec{{Name: "admin", Role: auth.Admin}, {Name: "reader", Role: auth.Reader}}
	for _, id := range sidecars {
		specs = append(specs, auth.TokenSpec{Name: id, Role: auth.Agent, Nodes: id})
	}
	tokensFile, files, err := auth.IssueTokens(c.Dir, specs...)
	if err != nil {
		return nil, err
	}
	c.TokensFile, c.Admin, c.Reader = tokensFile, files["admin"], files["reader"]
	for _, id := range sidecars {
		c.Agents[id] = files[id]
	}
	return c, nil
}

// coordinatorArgs are a member's credential flags.
func (c *Creds) coordinatorArgs(id string) []string {
	return []string{"--cert", filepath.Join(c.Dir, id+".pem"), "--key", filepath.Join(c.Dir, id+"-key.pem"),
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
