package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/allot-io/allot/internal/strictyaml"
	"go.yaml.in/yaml/v3"
)

// MinTokenLen is the shortest token accepted: 16 bytes, as from 96 random
// bits in base64. NewToken makes 32-byte ones.
const MinTokenLen = 16

// ErrTokens is wrapped by every error in a tokens file.
var ErrTokens = errors.New("auth: invalid tokens file")

// tokenEntry is one accepted token.
type tokenEntry struct {
	grant Grant
	hash  [sha256.Size]byte
	line  int // in the file it was read from
}

// Tokens is the table of accepted bearer tokens.
type Tokens struct {
	entries []tokenEntry
}

// Len is how many tokens the table accepts.
func (t *Tokens) Len() int { return len(t.entries) }

// Lookup returns the grant of a presented token. It compares the token's
// SHA-256 with every entry's in constant time, so neither which entry
// matched nor how much of a token was right shows in how long it takes.
func (t *Tokens) Lookup(token string) (Grant, bool) {
	h := sha256.Sum256([]byte(token))
	found := -1
	for i := range t.entries {
		if subtle.ConstantTimeCompare(h[:], t.entries[i].hash[:]) == 1 && found < 0 {
			found = i
		}
	}
	if found < 0 {
		return Grant{}, false
	}
	return t.entries[found].grant, true
}

// Named returns the grant of the entry called name, and the line of the
// file it is on: for tools that edit a tokens file.
func (t *Tokens) Named(name string) (g Grant, line int, ok bool) {
	for _, e := range t.entries {
		if e.grant.Name == name {
			return e.grant, e.line, true
		}
	}
	return Grant{}, 0, false
}

// Names are the entries' names, in the file's order.
func (t *Tokens) Names() []string {
	out := make([]string, len(t.entries))
	for i, e := range t.entries {
		out[i] = e.grant.Name
	}
	return out
}

// StaticToken is a table of one token, for a token given on the command
// line (the legacy --admin-token).
func StaticToken(name string, role Role, token string) *Tokens {
	return &Tokens{entries: []tokenEntry{{grant: Grant{Role: role, Name: name}, hash: sha256.Sum256([]byte(token))}}}
}

// tokenFields are the keys of one entry in a tokens file.
var tokenFields = map[string]bool{"name": true, "role": true, "nodes": true, "regions": true, "tenant": true, "token": true, "sha256": true}

// ParseTokens reads a tokens file:
//
//	tokens:
//	  - name: gateways-east        # in logs and metrics; never the token
//	    role: agent                # agent, reader or admin
//	    nodes: "gw-east-*"         # agents: the node IDs it may report as
//	    regions: "us-east"         # optional: the regions it may report in
//	    sha256: 9f86d0…            # hex SHA-256 of the token, or:
//	  - name: billing
//	    role: reader
//	    token: "…"                 # the token itself
//	  - name: dash-acme
//	    role: balance              # reads one tenant's balance, nothing else
//	    tenant: acme               # balance tokens: the tenant it may read
//	    sha256: …
//
// name names the file in errors, with the line of each problem.
func ParseTokens(name string, data []byte) (*Tokens, error) {
	root, err := strictyaml.Parse(data)
	if err != nil {
		return nil, tokensYAMLError(name, err)
	}
	bad := func(n *yaml.Node, format string, args ...any) error {
		return fmt.Errorf("%w: %s:%d: %s", ErrTokens, name, n.Line, fmt.Sprintf(format, args...))
	}
	if root == nil || len(root.Content) == 0 {
		return nil, fmt.Errorf("%w: %s: empty; want a tokens: list", ErrTokens, name)
	}
	top := root.Content[0]
	if top.Kind != yaml.MappingNode {
		return nil, bad(top, "want a mapping with a tokens: list")
	}
	var list *yaml.Node
	for i := 0; i+1 < len(top.Content); i += 2 {
		if k := top.Content[i]; k.Value != "tokens" {
			return nil, bad(k, "unknown field %q (want tokens)", k.Value)
		}
		list = top.Content[i+1]
	}
	if list == nil || list.Kind != yaml.SequenceNode {
		return nil, bad(top, "want a tokens: list")
	}
	t := &Tokens{}
	names := map[string]int{}
	for _, item := range list.Content {
		e, err := parseEntry(item, bad)
		if err != nil {
			return nil, err
		}
		if line, dup := names[e.grant.Name]; dup {
			return nil, bad(item, "name %q is already used on line %d", e.grant.Name, line)
		}
		names[e.grant.Name] = item.Line
		e.line = item.Line
		t.entries = append(t.entries, e)
	}
	return t, nil
}

// tokensYAMLError names the file and line of what strictyaml refused,
// and says how to fix the mistakes people make with tokens files.
func tokensYAMLError(name string, err error) error {
	var dup *strictyaml.DuplicateKeyError
	var doc *strictyaml.SecondDocumentError
	switch {
	case errors.As(err, &dup) && dup.Path == "" && dup.Key == "tokens":
		// What appending `allot token` output with >> makes.
		return fmt.Errorf("%w: %s:%d: %w: a tokens file holds one tokens: list; put every entry under it (allot token --append %s adds one)", ErrTokens, name, dup.Line, dup, name)
	case errors.As(err, &dup) && strings.HasPrefix(dup.Path, "tokens["):
		return fmt.Errorf("%w: %s:%d: %w: give each field of an entry once", ErrTokens, name, dup.Line, dup)
	case errors.As(err, &dup):
		return fmt.Errorf("%w: %s:%d: %w", ErrTokens, name, dup.Line, dup)
	case errors.As(err, &doc):
		return fmt.Errorf("%w: %s:%d: %w; put every entry under one tokens: list", ErrTokens, name, doc.Line, doc)
	}
	if line, msg := strictyaml.Location(err); line > 0 {
		return fmt.Errorf("%w: %s:%d: %s", ErrTokens, name, line, msg)
	}
	return fmt.Errorf("%w: %s: %v", ErrTokens, name, err)
}

func parseEntry(item *yaml.Node, bad func(*yaml.Node, string, ...any) error) (tokenEntry, error) {
	var e tokenEntry
	if item.Kind != yaml.MappingNode {
		return e, bad(item, "each token is a mapping of name, role, nodes, regions, tenant and token or sha256")
	}
	f := map[string]string{}
	for i := 0; i+1 < len(item.Content); i += 2 {
		k, v := item.Content[i], item.Content[i+1]
		if !tokenFields[k.Value] {
			return e, bad(k, "unknown field %q (want name, role, nodes, regions, tenant, token or sha256)", k.Value)
		}
		if v.Kind != yaml.ScalarNode {
			return e, bad(v, "%s: want a string", k.Value)
		}
		f[k.Value] = v.Value
	}
	if f["name"] == "" {
		return e, bad(item, "name is required")
	}
	role, err := ParseRole(f["role"])
	if err != nil || role == Member {
		return e, bad(item, "%s: role must be agent, reader, balance or admin", f["name"])
	}
	e.grant = Grant{Role: role, Name: f["name"], NodeGlob: f["nodes"], RegionGlob: f["regions"], Tenant: f["tenant"]}
	switch {
	case role == Agent && f["nodes"] == "":
		return e, bad(item, "%s: an agent token needs nodes, the node IDs it may report as (a pattern such as \"gw-*\")", f["name"])
	case role != Agent && (f["nodes"] != "" || f["regions"] != ""):
		return e, bad(item, "%s: nodes and regions bind agent tokens only", f["name"])
	case role == Balance && f["tenant"] == "":
		return e, bad(item, "%s: a balance token needs tenant, the one tenant whose balance it may read", f["name"])
	case role != Balance && f["tenant"] != "":
		return e, bad(item, "%s: tenant binds balance tokens only", f["name"])
	}
	for _, p := range []string{"nodes", "regions"} {
		if _, err := path.Match(f[p], ""); err != nil {
			return e, bad(item, "%s: %s %q is not a valid pattern", f["name"], p, f[p])
		}
	}
	switch tok, sum := f["token"], f["sha256"]; {
	case (tok == "") == (sum == ""):
		return e, bad(item, "%s: give exactly one of token and sha256", f["name"])
	case tok != "" && len(tok) < MinTokenLen:
		return e, bad(item, "%s: a token must be at least %d bytes", f["name"], MinTokenLen)
	case tok != "":
		e.hash = sha256.Sum256([]byte(tok))
	default:
		b, err := hex.DecodeString(sum)
		if err != nil || len(b) != sha256.Size {
			return e, bad(item, "%s: sha256 must be 64 hex digits", f["name"])
		}
		copy(e.hash[:], b)
	}
	return e, nil
}

// NewToken returns a random token: 32 bytes from crypto/rand in URL-safe
// base64.
func NewToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand.Read)
	return base64.RawURLEncoding.EncodeToString(b)
}

// TokenSHA256 is the hex SHA-256 of a token, for a tokens file's sha256.
func TokenSHA256(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// TokenFile watches a tokens file, re-reading it when it changes.
type TokenFile struct{ w *watched[*Tokens] }

// WatchTokens reads a tokens file and keeps it current. onError hears of
// a changed file that fails to parse (the previous table stays).
func WatchTokens(path string, onError func(error)) (*TokenFile, error) {
	w, err := watch([]string{path}, func(d [][]byte) (*Tokens, error) { return ParseTokens(path, d[0]) }, onError)
	if err != nil {
		return nil, err
	}
	return &TokenFile{w: w}, nil
}

// Tokens is the current table.
func (f *TokenFile) Tokens() *Tokens { return f.w.get() }
