// Package strictyaml reads Allot's YAML files strictly: one document, and
// no key given twice in any mapping. YAML decoders read a node tree
// without complaint when a key repeats, and whatever then reads the tree
// keeps the last value: a second `tokens:` list appended to a tokens file
// would silently replace the first. Every file Allot parses through a node
// tree (tokens files, --config files, rules files) goes through Parse, so
// that they refuse the same mistakes with the same words.
package strictyaml

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ErrDuplicateKey is wrapped by every DuplicateKeyError.
var ErrDuplicateKey = errors.New("a key is given twice")

// ErrSecondDocument is returned for a file holding more than one YAML
// document.
var ErrSecondDocument = errors.New("holds more than one YAML document")

// DuplicateKeyError is a key given a second time in one mapping.
type DuplicateKeyError struct {
	Key   string
	Line  int // where it is given again
	First int // where it was first given
	// Path is where the mapping is, in the file's terms: "" for the top
	// level, "tokens[0]" for the first item of the top-level tokens list.
	Path string
}

func (e *DuplicateKeyError) Error() string {
	return fmt.Sprintf("%s is given twice (first on line %d)", e.Field(), e.First)
}

// Field is the repeated key with its path, as "tokens[0].role".
func (e *DuplicateKeyError) Field() string {
	if e.Path == "" {
		return e.Key
	}
	return e.Path + "." + e.Key
}

// Unwrap makes errors.Is(err, ErrDuplicateKey) true.
func (e *DuplicateKeyError) Unwrap() error { return ErrDuplicateKey }

// SecondDocumentError says where a second document starts.
type SecondDocumentError struct{ Line int }

func (e *SecondDocumentError) Error() string { return ErrSecondDocument.Error() }

// Unwrap makes errors.Is(err, ErrSecondDocument) true.
func (e *SecondDocumentError) Unwrap() error { return ErrSecondDocument }

// Parse reads data's one YAML document into a node tree: the document
// node, or nil for a file with none. It refuses a second document
// (*SecondDocumentError) and a key given twice in any mapping
// (*DuplicateKeyError); a syntax error is the YAML parser's, as
// "line N: message" when it knows the line.
func Parse(data []byte) (*yaml.Node, error) {
	root, err := Decode(data)
	if err != nil {
		return nil, err
	}
	if err := Unique(root); err != nil {
		return nil, err
	}
	return root, nil
}

// Decode is Parse without Unique, for a caller that wants the tree to
// say more about a key given twice (which rule it is in).
func Decode(data []byte) (doc *yaml.Node, err error) {
	defer func() {
		if r := recover(); r != nil { // a parser bug must not take the caller down
			doc, err = nil, fmt.Errorf("the YAML parser failed: %v", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, errors.New(strings.TrimPrefix(err.Error(), "yaml: "))
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		return nil, &SecondDocumentError{Line: max(extra.Line, 1)}
	case !errors.Is(err, io.EOF):
		return nil, errors.New(strings.TrimPrefix(err.Error(), "yaml: "))
	}
	return &root, nil
}

// Unique returns a *DuplicateKeyError for the first key, in document
// order, given twice in one mapping anywhere in the tree under n. It does
// not follow aliases: the anchored node is checked where it is defined.
func Unique(n *yaml.Node) error {
	if n == nil {
		return nil
	}
	return unique(n, "")
}

func unique(n *yaml.Node, path string) error {
	if n == nil {
		return nil
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if err := unique(c, path); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if err := unique(c, path+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
	case yaml.MappingNode:
		first := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, child := n.Content[i], path
			if k.Kind == yaml.ScalarNode {
				if line, dup := first[k.Value]; dup {
					return &DuplicateKeyError{Key: k.Value, Line: k.Line, First: line, Path: path}
				}
				first[k.Value] = k.Line
				child = join(path, k.Value)
			}
			if err := unique(n.Content[i+1], child); err != nil {
				return err
			}
		}
	}
	return nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

var syntaxLine = regexp.MustCompile(`^line (\d+): (.*)$`)

// Location splits what Parse returned into the line it names and the
// message without it: the line of a DuplicateKeyError or
// SecondDocumentError, or of a syntax error in the parser's "line N:
// message" form. The line is 0 when the error names none.
func Location(err error) (line int, msg string) {
	var dup *DuplicateKeyError
	var doc *SecondDocumentError
	switch {
	case errors.As(err, &dup):
		return dup.Line, dup.Error()
	case errors.As(err, &doc):
		return doc.Line, doc.Error()
	}
	msg = err.Error()
	if m := syntaxLine.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	return line, msg
}
