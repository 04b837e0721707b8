package rules

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	"go.yaml.in/yaml/v3"
)

// MaxFileSize bounds a rule file, so that a mistaken path cannot make a
// coordinator or agent read gigabytes.
const MaxFileSize = 16 << 20

// document is a rule file's top level.
type document struct {
	Rules []Rule `yaml:"rules"`
}

// Parse reads a rule file's contents strictly and validates every rule.
// name is used in error messages. Every error is an *Error, or an Errors
// list of them, naming the file, line and field.
func Parse(name string, data []byte) ([]Rule, error) {
	if len(data) > MaxFileSize {
		return nil, &Error{File: name, Msg: fmt.Sprintf("file is %d bytes; at most %d", len(data), MaxFileSize)}
	}
	var doc document
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, yamlError(name, data, err)
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, &Error{File: name, Msg: "holds more than one YAML document; put every rule under one top-level rules: list"}
	}
	var root yaml.Node
	_ = yaml.Unmarshal(data, &root) // already decoded once; only used for line numbers
	var errs Errors
	for i := range doc.Rules {
		for _, e := range doc.Rules[i].Validate() {
			e.File, e.Line = name, fieldLine(&root, i, e.Field)
			if e.Rule == "" {
				e.Rule = fmt.Sprintf("#%d", i+1)
			}
			errs = append(errs, e)
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	if _, err := NewSet(0, doc.Rules); err != nil {
		// Only set-level problems remain (duplicate names); add lines.
		var es Errors
		if errors.As(err, &es) {
			for _, e := range es {
				e.File = name
				for i, r := range doc.Rules {
					if r.Name == e.Rule {
						e.Line = fieldLine(&root, i, "name") // the last definition wins the line
					}
				}
			}
		}
		return nil, err
	}
	return doc.Rules, nil
}

// Load reads and validates the rule file at path.
func Load(path string) ([]Rule, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("rules: reading %s: %w", path, err)
	}
	return Parse(path, data)
}

var yamlLine = regexp.MustCompile(`^line (\d+): (.*)$`)
var unknownField = regexp.MustCompile(`^field (\S+) not found in type \S+$`)

// yamlError turns the YAML decoder's errors into Errors with lines.
func yamlError(name string, data []byte, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		// A value's own parser (scope, algorithm, intent, fail mode)
		// refused it; the decoder does not say where, so find it.
		if e := locateValueError(data); e != nil {
			e.File = name
			return e
		}
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		line := 0
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			line, _ = strconv.Atoi(m[1])
			msg = m[2]
		}
		return &Error{File: name, Line: line, Msg: msg}
	}
	var errs Errors
	for _, s := range te.Errors {
		e := &Error{File: name, Msg: s}
		if m := yamlLine.FindStringSubmatch(s); m != nil {
			e.Line, _ = strconv.Atoi(m[1])
			e.Msg = m[2]
		}
		if m := unknownField.FindStringSubmatch(e.Msg); m != nil {
			e.Field, e.Msg = m[1], "unknown field"
		}
		errs = append(errs, e)
	}
	return errs
}

// locateValueError finds the first enumerated value in a rule file that its
// parser refuses, with its rule, field and line.
func locateValueError(data []byte) *Error {
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil {
		return nil
	}
	doc := &root
	if doc.Kind == yaml.DocumentNode && len(doc.Content) > 0 {
		doc = doc.Content[0]
	}
	list := mappingValue(doc, "rules")
	if list == nil || list.Kind != yaml.SequenceNode {
		return nil
	}
	parsers := []struct {
		field, what, want string
		parse             func(string) error
	}{
		{"scope", "scope", "global, ip, tenant, user, route or descriptor", func(s string) error { _, err := ParseScope(s); return err }},
		{"algorithm", "algorithm", "fixed_window, sliding_log, sliding_window, token_bucket or gcra", func(s string) error { _, err := algo.ParseAlgorithm(s); return err }},
		{"intent", "intent", "capacity, quota or abuse", func(s string) error { _, err := lease.ParseIntent(s); return err }},
		{"fail_mode", "fail mode", "fallback, open or closed", func(s string) error { _, err := lease.ParseFailMode(s); return err }},
	}
	for i, item := range list.Content {
		rule := fmt.Sprintf("#%d", i+1)
		if n := mappingValue(item, "name"); n != nil && n.Value != "" {
			rule = n.Value
		}
		for _, p := range parsers {
			key, value := mappingEntry(item, p.field)
			if value == nil || p.parse(value.Value) == nil {
				continue
			}
			return &Error{Line: key.Line, Rule: rule, Field: p.field, Msg: fmt.Sprintf("unknown %s %q (want %s)", p.what, value.Value, p.want)}
		}
	}
	return nil
}

// fieldLine finds the line of a field of rule i in the parsed document, or
// the rule's own line when the field is absent (a missing required field).
func fieldLine(root *yaml.Node, i int, field string) int {
	doc := root
	if doc.Kind == yaml.DocumentNode && len(doc.Content) > 0 {
		doc = doc.Content[0]
	}
	list := mappingValue(doc, "rules")
	if list == nil || list.Kind != yaml.SequenceNode || i >= len(list.Content) {
		return 0
	}
	node := list.Content[i]
	line := node.Line
	for _, part := range strings.Split(field, ".") {
		if j := strings.IndexByte(part, '['); j >= 0 {
			part = part[:j]
		}
		key, value := mappingEntry(node, part)
		if key == nil {
			break
		}
		line, node = key.Line, value
	}
	return line
}

func mappingValue(n *yaml.Node, key string) *yaml.Node {
	_, v := mappingEntry(n, key)
	return v
}

func mappingEntry(n *yaml.Node, key string) (*yaml.Node, *yaml.Node) {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil, nil
	}
	for j := 0; j+1 < len(n.Content); j += 2 {
		if n.Content[j].Value == key {
			return n.Content[j], n.Content[j+1]
		}
	}
	return nil, nil
}
