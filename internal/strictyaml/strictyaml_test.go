package strictyaml

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name, src string
		// want is the error's text, "" for none; line and first are a
		// DuplicateKeyError's lines, or a SecondDocumentError's line.
		want        string
		line, first int
		sentinel    error
	}{
		{name: "empty", src: ""},
		{name: "comments only", src: "# nothing\n"},
		{name: "one list", src: "tokens:\n  - name: a\n  - name: b\n"},
		{name: "same key in two items", src: "tokens:\n  - name: a\n  - name: a\n"},
		{name: "a list appended with >>", src: "tokens:\n  - name: a\n    role: admin\ntokens:\n  - name: b\n",
			want: "tokens is given twice (first on line 1)", line: 4, first: 1, sentinel: ErrDuplicateKey},
		{name: "a field repeated in an entry", src: "tokens:\n  - name: a\n    role: admin\n    role: reader\n",
			want: "tokens[0].role is given twice (first on line 3)", line: 4, first: 3, sentinel: ErrDuplicateKey},
		{name: "flow mapping", src: "tokens: [{name: a, name: b}]\n",
			want: "tokens[0].name is given twice (first on line 1)", line: 1, first: 1, sentinel: ErrDuplicateKey},
		{name: "deep first in document order", src: "a:\n  b: 1\n  b: 2\na: 3\n",
			want: "a.b is given twice (first on line 2)", line: 3, first: 2, sentinel: ErrDuplicateKey},
		{name: "a second document", src: "tokens: []\n---\ntokens: []\n",
			want: "holds more than one YAML document", line: 2, sentinel: ErrSecondDocument},
		{name: "alias not followed", src: "a: &x {k: 1}\nb: *x\n"},
		{name: "syntax", src: "tokens: [\n", want: "line 1: did not find expected node content"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.src))
			if tt.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want %q", err, tt.want)
			}
			if tt.sentinel != nil && !errors.Is(err, tt.sentinel) {
				t.Errorf("error %v does not wrap %v", err, tt.sentinel)
			}
			var dup *DuplicateKeyError
			var doc *SecondDocumentError
			switch {
			case errors.As(err, &dup):
				if dup.Line != tt.line || dup.First != tt.first {
					t.Errorf("lines %d, first %d; want %d, %d", dup.Line, dup.First, tt.line, tt.first)
				}
			case errors.As(err, &doc):
				if doc.Line != tt.line {
					t.Errorf("second document at line %d, want %d", doc.Line, tt.line)
				}
			}
		})
	}
}

func TestLocation(t *testing.T) {
	for _, tt := range []struct {
		src  string
		line int
		msg  string
	}{
		{"a: 1\na: 2\n", 2, "a is given twice (first on line 1)"},
		{"a: 1\n---\na: 2\n", 2, "holds more than one YAML document"},
		{"a: [\n", 1, "did not find expected node content"},
	} {
		_, err := Parse([]byte(tt.src))
		if line, msg := Location(err); line != tt.line || msg != tt.msg {
			t.Errorf("%q: Location = %d, %q; want %d, %q", tt.src, line, msg, tt.line, tt.msg)
		}
	}
}

func TestBadDurations(t *testing.T) {
	type spec struct {
		Period time.Duration `yaml:"period"`
		Other  int           `yaml:"other"`
	}
	src := "items:\n  - period: 1d\n    other: x\n  - {period: 90}\n  - period: 1m\n  - period: 2 weeks\n  - {other: 1d12h, period: 1d12h30m5s}\n"
	root, err := Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct{ Items []spec }
	err = root.Decode(&doc)
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		t.Fatalf("decoding: %v, want a *yaml.TypeError", err)
	}
	got := BadDurations(root, te)
	want := map[int]string{
		2: `items[0].period: "1d": Go durations have no d; use 24h`,
		4: `items[1].period: "90": a duration needs a unit: 90s, 90m or 90h`,
		6: `items[3].period: "2 weeks": not a duration: write a number and a unit (ns, us, ms, s, m or h), such as 500ms, 90s, 1m or 24h`,
		7: `items[4].period: "1d12h30m5s": Go durations have no d; use 36h30m5s`,
	}
	if len(got) != len(want) {
		t.Errorf("found %d bad durations, want %d: %v", len(got), len(want), got)
	}
	for line, w := range want {
		d := got[line]
		if d == nil || d.Line != line || d.Path+": "+d.Err.Error() != w {
			t.Errorf("line %d: %+v, want %s", line, d, w)
		}
	}
}
