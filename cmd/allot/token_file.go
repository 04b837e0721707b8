package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/allot-io/allot/internal/auth"
	"github.com/allot-io/allot/internal/strictyaml"
	"go.yaml.in/yaml/v3"
)

// tokensFile is a coordinators' tokens file that allot token --append
// adds an entry to.
type tokensFile struct {
	path   string // as given
	target string // the file itself, symbolic links resolved
	data   []byte // as read; nil when it does not exist yet
	exists bool
	info   fs.FileInfo // when it exists: its mode and owner, kept
	tokens *auth.Tokens
	root   *yaml.Node // nil for a file with no YAML in it
}

// readTokensFile reads and checks the tokens file at path, as the
// coordinators would: entries are added only to a file they accept. A
// missing file is an empty one.
func readTokensFile(path string) (*tokensFile, error) {
	f := &tokensFile{path: path, target: path, tokens: &auth.Tokens{}}
	target, err := filepath.EvalSymlinks(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return f, nil
	case err != nil:
		return nil, fmt.Errorf("reading tokens file: %w", err)
	}
	f.target = target
	if f.info, err = os.Stat(target); err != nil {
		return nil, fmt.Errorf("reading tokens file: %w", err)
	}
	if !f.info.Mode().IsRegular() {
		return nil, fmt.Errorf("tokens file %s is not a regular file", path)
	}
	if f.data, err = os.ReadFile(target); err != nil {
		return nil, fmt.Errorf("reading tokens file: %w", err)
	}
	f.exists = true
	if f.root, err = strictyaml.Parse(f.data); err == nil && f.root == nil {
		return f, nil // only comments: no entries yet
	}
	if f.tokens, err = auth.ParseTokens(path, f.data); err != nil {
		return nil, fmt.Errorf("%w; fix it first: nothing was written", err)
	}
	return f, nil
}

// with is the file's contents with entry added at the end of its tokens:
// list, everything else as it was: appended as text where the list is a
// block list, which keeps comments and layout, and else re-encoded.
func (f *tokensFile) with(entry tokenDoc) ([]byte, error) {
	if _, line, ok := f.tokens.Named(entry.Name); ok {
		return nil, fmt.Errorf("%s:%d: a token named %q is already listed; names are unique in the file: choose another (to rotate it, --like %s)", f.path, line, entry.Name, entry.Name)
	}
	var tried []error
	for _, candidate := range []func(tokenDoc) ([]byte, error){f.appended, f.reencoded} {
		data, err := candidate(entry)
		if err == nil {
			err = f.check(data, entry)
		}
		if err == nil {
			return data, nil
		}
		tried = append(tried, err)
	}
	return nil, fmt.Errorf("could not add the entry to %s: %w", f.path, errors.Join(tried...))
}

// check makes sure data is the file with entry added and nothing lost.
func (f *tokensFile) check(data []byte, entry tokenDoc) error {
	t, err := auth.ParseTokens(f.path, data)
	if err != nil {
		return err
	}
	g, _, ok := t.Named(entry.Name)
	if !ok || t.Len() != f.tokens.Len()+1 || g.Role.String() != entry.Role || g.NodeGlob != entry.Nodes || g.RegionGlob != entry.Regions || g.Tenant != entry.Tenant {
		return errors.New("the result does not hold every entry and the new one")
	}
	return nil
}

// tokensList is the file's tokens: key and its value, or nils.
func tokensList(root *yaml.Node) (key, list *yaml.Node) {
	if root == nil || len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return nil, nil
	}
	top := root.Content[0]
	for i := 0; i+1 < len(top.Content); i += 2 {
		if top.Content[i].Value == "tokens" {
			return top.Content[i], top.Content[i+1]
		}
	}
	return nil, nil
}

// appended adds the entry as text after the file's last line, indented
// as the list's items are.
func (f *tokensFile) appended(entry tokenDoc) ([]byte, error) {
	head := bytes.Clone(f.data)
	if len(head) > 0 && head[len(head)-1] != '\n' {
		head = append(head, '\n')
	}
	key, list := tokensList(f.root)
	var indent string
	switch {
	case f.root == nil:
		head = append(head, "tokens:\n"...)
		indent = "  "
	case list != nil && list.Kind == yaml.SequenceNode && list.Style&yaml.FlowStyle == 0 && len(list.Content) > 0:
		indent = strings.Repeat(" ", list.Column-1)
	case list != nil && list.Kind == yaml.ScalarNode && list.Tag == "!!null" && list.Value == "":
		indent = strings.Repeat(" ", key.Column+1) // "tokens:" and nothing after it
	default:
		return nil, errors.New("its tokens: list is not a block list to append to")
	}
	item, err := entryItem(entry, indent)
	if err != nil {
		return nil, err
	}
	return append(head, item...), nil
}

// reencoded adds the entry to the parsed file and encodes it again: for
// a flow list (tokens: [...]) or an explicit null. Comments are kept as
// the YAML encoder places them.
func (f *tokensFile) reencoded(entry tokenDoc) ([]byte, error) {
	root, err := strictyaml.Parse(f.data) // a copy to change
	if err != nil {
		return nil, err
	}
	_, list := tokensList(root)
	if list == nil {
		return nil, errors.New("it has no tokens: list")
	}
	var item yaml.Node
	if err := item.Encode(entry); err != nil {
		return nil, err
	}
	if list.Kind != yaml.SequenceNode {
		*list = yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	}
	list.Style = 0
	list.Content = append(list.Content, &item)
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// replace writes data as the file, atomically: to a temporary file in the
// same directory, with the file's mode and owner (mode 0600 for a new
// file), renamed over it only if nobody changed it since it was read.
func (f *tokensFile) replace(data []byte) (err error) {
	dir, base := filepath.Split(f.target)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing tokens file: %w", err)
	}
	defer func() {
		if err != nil {
			os.Remove(tmp.Name())
		}
	}()
	mode := fs.FileMode(0o600)
	if f.exists {
		mode = f.info.Mode().Perm()
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("writing tokens file: %w", err)
	}
	if f.exists {
		if err := keepOwner(tmp, f.info); err != nil {
			tmp.Close()
			return fmt.Errorf("writing tokens file %s: keeping its owner: %w", f.path, err)
		}
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("writing tokens file: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("writing tokens file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing tokens file: %w", err)
	}
	if !f.exists {
		// Link, unlike rename, refuses to replace a file made meanwhile.
		if err := os.Link(tmp.Name(), f.target); err != nil {
			return fmt.Errorf("creating tokens file: %w", err)
		}
		os.Remove(tmp.Name())
		return syncDir(dir)
	}
	now, err := os.ReadFile(f.target)
	if err != nil {
		return fmt.Errorf("writing tokens file: %w", err)
	}
	if !bytes.Equal(now, f.data) {
		return fmt.Errorf("tokens file %s changed while the entry was being added; nothing was written: run the command again", f.path)
	}
	if err := os.Rename(tmp.Name(), f.target); err != nil {
		return fmt.Errorf("writing tokens file: %w", err)
	}
	return syncDir(dir)
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}
