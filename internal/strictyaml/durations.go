package strictyaml

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/allot-io/allot/internal/duration"
	"go.yaml.in/yaml/v3"
)

// BadDuration is a value a decoder refused for a time.Duration field,
// and what to write instead.
type BadDuration struct {
	Line int
	Path string // the field, as "rules[0].period"
	Err  error  // a *duration.Error: `"1d": Go durations have no d; use 24h`
}

var durationTypeError = regexp.MustCompile("^line (\\d+): cannot unmarshal !!\\w+ ?`?(.*?)`? into time\\.Duration$")

// BadDurations finds the values behind a decoder's type errors about
// time.Duration fields ("cannot unmarshal !!str `1d` into
// time.Duration", which names neither the field nor what to write), by
// line. root is the file's tree from Parse or Decode.
func BadDurations(root *yaml.Node, te *yaml.TypeError) map[int]*BadDuration {
	out := map[int]*BadDuration{}
	for _, msg := range te.Errors {
		m := durationTypeError.FindStringSubmatch(msg)
		if m == nil {
			continue
		}
		line, _ := strconv.Atoi(m[1])
		// The decoder quotes the value, its first 7 bytes and "..." when
		// longer than 10: enough to tell it from the line's other values.
		shown := m[2]
		matches := func(v *yaml.Node) bool {
			if p, cut := strings.CutSuffix(shown, "..."); cut && len(v.Value) > 10 {
				return strings.HasPrefix(v.Value, p)
			}
			return v.Value == shown
		}
		if path, v := valueAt(root, "", line, matches); v != nil {
			out[line] = &BadDuration{Line: line, Path: path, Err: durationError(v)}
		}
	}
	return out
}

// durationError is what to write instead of a scalar that is not a
// duration.
func durationError(v *yaml.Node) error {
	switch v.Tag {
	case "!!int", "!!float":
		return duration.Explain(v.Value) // a number: never a duration to the decoder
	}
	if _, err := duration.Parse(v.Value); err != nil {
		return err
	}
	return duration.Explain(v.Value)
}

// valueAt finds the first scalar value of a mapping key on line that
// matches, with its path.
func valueAt(n *yaml.Node, path string, line int, matches func(*yaml.Node) bool) (string, *yaml.Node) {
	if n == nil {
		return "", nil
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if p, v := valueAt(c, path, line, matches); v != nil {
				return p, v
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if p, v := valueAt(c, path+"["+strconv.Itoa(i)+"]", line, matches); v != nil {
				return p, v
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			child := join(path, k.Value)
			if v.Kind == yaml.ScalarNode && v.Line == line && matches(v) {
				return child, v
			}
			if p, found := valueAt(v, child, line, matches); found != nil {
				return p, found
			}
		}
	}
	return "", nil
}
