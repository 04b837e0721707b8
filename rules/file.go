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
	"github.com/allot-io/allot/internal/strictyaml"
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
	root, err := strictyaml.Decode(data)
	if err == nil {
		err = strictyaml.Unique(root)
	}
	if err != nil {
		e := structureError(root, err)
		e.File = name
		return nil, e
	}
	if root == nil {
		return nil, nil // an empty file: no rules
	}
	if e := shapeError(root); e != nil {
		e.File = name
		return nil, e
	}
	data, units := calendarPeriods(root, data)
	var doc document
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, yamlError(name, root, err)
	}
	for i, u := range units {
		if i < len(doc.Rules) {
			if doc.Rules[i].Cycle == nil {
				doc.Rules[i].Cycle = &Cycle{}
			}
			doc.Rules[i].Cycle.Unit = u
			doc.Rules[i].Cycle.Resolve()
		}
	}
	var errs Errors
	for i := range doc.Rules {
		for _, e := range doc.Rules[i].Validate() {
			e.File, e.Line = name, fieldLine(root, i, e.Field)
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
						e.Line = fieldLine(root, i, "name") // the last definition wins the line
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
var itemPath = regexp.MustCompile(`^rules\[(\d+)\](?:\.(.+))?$`)

// structureError is what strictyaml refused: a syntax error, a second
// document, or a key given twice, named by rule and field when it is in a
// rule.
func structureError(root *yaml.Node, err error) *Error {
	line, msg := strictyaml.Location(err)
	e := &Error{Line: line, Msg: msg}
	var dup *strictyaml.DuplicateKeyError
	switch {
	case errors.Is(err, strictyaml.ErrSecondDocument):
		e.Line, e.Msg = 0, "holds more than one YAML document; put every rule under one top-level rules: list"
	case errors.As(err, &dup) && dup.Path == "" && dup.Key == "rules":
		e.Msg = fmt.Sprintf("rules is given twice (first on line %d); put every rule under one top-level rules: list", dup.First)
	case errors.As(err, &dup):
		e.Msg = fmt.Sprintf("is given twice (first on line %d)", dup.First)
		e.Field = dup.Field()
		if m := itemPath.FindStringSubmatch(dup.Path); m != nil {
			// In a rule: the rule, and the field within it.
			i, _ := strconv.Atoi(m[1])
			e.Rule, e.Field = ruleName(root, i), dup.Key
			if m[2] != "" {
				e.Field = m[2] + "." + dup.Key
			}
		}
	}
	return e
}

// ruleFields are a rule's own fields, to recognise a rule written without
// the rules: list around it.
var ruleFields = map[string]bool{"name": true, "scope": true, "algorithm": true, "limit": true, "period": true, "intent": true}

// shapeError checks the top level: a mapping whose rules: is a list.
func shapeError(root *yaml.Node) *Error {
	doc := root
	if doc.Kind == yaml.DocumentNode && len(doc.Content) > 0 {
		doc = doc.Content[0]
	}
	if doc.Kind == yaml.ScalarNode && doc.Tag == "!!null" {
		return nil // "---" or "~": no rules
	}
	const want = "want a top-level rules: list"
	switch doc.Kind {
	case yaml.SequenceNode:
		return &Error{Line: doc.Line, Msg: want + ` (this file is a list: put "rules:" on a line of its own above it)`}
	case yaml.MappingNode:
	default:
		return &Error{Line: doc.Line, Msg: want}
	}
	key, list := mappingEntry(doc, "rules")
	if key == nil {
		for i := 0; i+1 < len(doc.Content); i += 2 {
			if k := doc.Content[i]; ruleFields[k.Value] {
				return &Error{Line: doc.Line, Msg: fmt.Sprintf("%s (%s is a rule's field: put the rule under rules: as a list item, \"- name: ...\")", want, k.Value)}
			}
		}
		return &Error{Line: doc.Line, Msg: want}
	}
	if list.Kind == yaml.AliasNode && list.Alias != nil {
		list = list.Alias
	}
	switch {
	case list.Kind == yaml.SequenceNode, list.Kind == yaml.ScalarNode && list.Tag == "!!null":
		return nil
	case list.Kind == yaml.MappingNode:
		return &Error{Line: key.Line, Field: "rules", Msg: "want a list of rules, got a mapping: start each rule with \"- \""}
	}
	return &Error{Line: key.Line, Field: "rules", Msg: "want a list of rules"}
}

// ruleName is rule i's name as errors give it: its name, or its
// position when it has none.
func ruleName(root *yaml.Node, i int) string {
	doc := root
	if doc != nil && doc.Kind == yaml.DocumentNode && len(doc.Content) > 0 {
		doc = doc.Content[0]
	}
	if list := mappingValue(doc, "rules"); list != nil && list.Kind == yaml.SequenceNode && i < len(list.Content) {
		if n := mappingValue(list.Content[i], "name"); n != nil && n.Kind == yaml.ScalarNode && n.Value != "" {
			return n.Value
		}
	}
	return fmt.Sprintf("#%d", i+1)
}

// yamlError turns the YAML decoder's errors into Errors with lines, a bad
// duration's by rule and field, with what to write instead.
func yamlError(name string, root *yaml.Node, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		// A value's own parser (scope, algorithm, intent, fail mode)
		// refused it; the decoder does not say where, so find it.
		if e := locateValueError(root); e != nil {
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
	durations := strictyaml.BadDurations(root, te)
	var errs Errors
	for _, s := range te.Errors {
		e := &Error{File: name, Msg: s}
		if m := yamlLine.FindStringSubmatch(s); m != nil {
			e.Line, _ = strconv.Atoi(m[1])
			e.Msg = m[2]
		}
		if d, ok := durations[e.Line]; ok {
			e.Field, e.Msg = d.Path, d.Err.Error()
			if m := itemPath.FindStringSubmatch(d.Path); m != nil && m[2] != "" {
				i, _ := strconv.Atoi(m[1])
				e.Rule, e.Field = ruleName(root, i), m[2]
			}
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
func locateValueError(root *yaml.Node) *Error {
	doc := root
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
