package main

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

// A file a doc shows in full is a fenced block whose first line is the
// marker comment "# file: NAME" (a comment in nginx's, Caddy's, YAML's
// and the shell's syntax alike). The tests that run such files read them
// out of the doc, so that what a reader copies is what was run.

const docFileMarker = "# file: "

var docFileName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// docBlock is one marked block of a doc.
type docBlock struct {
	doc  string // the doc's path
	line int    // the marker's line
	name string
	text string // the block's lines, marker included, each ending in "\n"
}

func (b docBlock) String() string { return fmt.Sprintf("%s:%d: %s", b.doc, b.line, b.name) }

// readDocBlocks returns a Markdown file's marked blocks by name.
func readDocBlocks(path string) (map[string]docBlock, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the doc: %w", err)
	}
	return parseDocBlocks(path, string(data))
}

// parseDocBlocks finds the marked blocks of doc's text. A marker anywhere
// but on its block's first line, a name given twice, a name that is no
// plain file name and a block never closed are errors naming doc:line.
func parseDocBlocks(doc, text string) (map[string]docBlock, error) {
	blocks := map[string]docBlock{}
	var (
		fence   string    // the open block's fence; "" outside blocks
		first   bool      // the next line is the open block's first
		current *docBlock // the open block, if marked
		opened  int
	)
	for i, line := range strings.SplitAfter(text, "\n") {
		n, bare := i+1, strings.TrimRight(line, "\r\n")
		trimmed := strings.TrimLeft(bare, " ")
		if fence == "" {
			if strings.HasPrefix(trimmed, "```") {
				fence, first, current, opened = trimmed[:len(trimmed)-len(strings.TrimLeft(trimmed, "`"))], true, nil, n
			}
			continue
		}
		if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, "`") == "" {
			if current != nil {
				blocks[current.name] = *current
			}
			fence = ""
			continue
		}
		if name, ok := strings.CutPrefix(strings.TrimSpace(bare), docFileMarker); ok {
			switch name = strings.TrimSpace(name); {
			case !first:
				return nil, fmt.Errorf("%s:%d: %q must be the first line of its block (opened at line %d)", doc, n, docFileMarker+name, opened)
			case !docFileName.MatchString(name):
				return nil, fmt.Errorf("%s:%d: %q is not a file name (letters, digits, '.', '_', '-')", doc, n, name)
			}
			if prev, dup := blocks[name]; dup {
				return nil, fmt.Errorf("%s:%d: %s is also the block at line %d", doc, n, name, prev.line)
			}
			current = &docBlock{doc: doc, line: n, name: name}
		}
		first = false
		if current != nil {
			current.text += bare + "\n"
		}
	}
	if fence != "" {
		return nil, fmt.Errorf("%s:%d: the block opened here is never closed", doc, opened)
	}
	return blocks, nil
}

// docPort is a port a doc's files use that a test must change: the doc
// says which, and the test replaces nothing else.
type docPort struct {
	port string // as the doc has it, e.g. "8000"
	what string // what listens there, for errors
	to   string // the port the test uses
}

var portInText = regexp.MustCompile(`:([0-9]+)\b`)

// withPorts is b's text with each of ports replaced; each must occur in
// it, as ":PORT".
func (b docBlock) withPorts(ports ...docPort) (string, error) {
	for _, p := range ports {
		if !strings.Contains(b.text, ":"+p.port) {
			return "", fmt.Errorf("%s: no :%s (%s) in it", b, p.port, p.what)
		}
	}
	return portInText.ReplaceAllStringFunc(b.text, func(m string) string {
		for _, p := range ports {
			if m[1:] == p.port {
				return ":" + p.to
			}
		}
		return m
	}), nil
}

// command is the one shell command of a block that shows how to start
// something: comments and blank lines left out, lines ending in '\' joined.
func (b docBlock) command(text string) (string, error) {
	var cmds []string
	joined := ""
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		line = strings.TrimSpace(line)
		if joined == "" && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			joined += strings.TrimSpace(cont) + " "
			continue
		}
		cmds = append(cmds, joined+line)
		joined = ""
	}
	if joined != "" {
		return "", fmt.Errorf("%s: its last line ends in '\\'", b)
	}
	if len(cmds) != 1 {
		return "", fmt.Errorf("%s: want one command, found %d: %q", b, len(cmds), cmds)
	}
	return cmds[0], nil
}

func TestDocBlocks(t *testing.T) {
	const good = "# A doc\n\n```yaml\n# file: rules.yaml\nrules: []\n```\n\n```sh\necho unmarked\n```\n\n" +
		"  ````nginx\n  # file: nginx.conf\n  events {}\n  ```\n  ````\n"
	blocks, err := parseDocBlocks("doc.md", good)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]docBlock{
		"rules.yaml": {doc: "doc.md", line: 4, name: "rules.yaml", text: "# file: rules.yaml\nrules: []\n"},
		"nginx.conf": {doc: "doc.md", line: 13, name: "nginx.conf", text: "  # file: nginx.conf\n  events {}\n  ```\n"},
	}
	if len(blocks) != len(want) {
		t.Errorf("blocks %v, want %v", blocks, want)
	}
	for name, w := range want {
		if got := blocks[name]; got != w {
			t.Errorf("block %s: %+v, want %+v", name, got, w)
		}
	}

	for _, tt := range []struct{ name, text, err string }{
		{"marker not first", "```\nx\n# file: a.conf\n```\n", `doc.md:3: "# file: a.conf" must be the first line of its block (opened at line 1)`},
		{"twice", "```\n# file: a.conf\n```\n\n```\n# file: a.conf\n```\n", "doc.md:6: a.conf is also the block at line 2"},
		{"not a file name", "```\n# file: ../etc/passwd\n```\n", `doc.md:2: "../etc/passwd" is not a file name`},
		{"never closed", "text\n```nginx\n# file: a.conf\nevents {}\n", "doc.md:2: the block opened here is never closed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := parseDocBlocks("doc.md", tt.text); err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("error %v, want %q", err, tt.err)
			}
		})
	}

	b := docBlock{doc: "doc.md", line: 7, name: "run.sh", text: "# file: run.sh\n# starts it\nallot agent --http-addr 127.0.0.1:7600 \\\n    --authz-deny-status 403\n"}
	text, err := b.withPorts(docPort{"7600", "the sidecar", "41234"})
	if err != nil {
		t.Fatal(err)
	}
	if cmd, err := b.command(text); err != nil || cmd != "allot agent --http-addr 127.0.0.1:41234 --authz-deny-status 403" {
		t.Errorf("command %q, %v", cmd, err)
	}
	if got, _ := (docBlock{text: "listen 127.0.0.1:8000; # not :80001 nor :18000\n"}).withPorts(docPort{"8000", "the gateway", "5"}); got != "listen 127.0.0.1:5; # not :80001 nor :18000\n" {
		t.Errorf("withPorts replaced %q", got)
	}
	for _, tt := range []struct {
		name, text, err string
		ports           []docPort
	}{
		{"port missing", "listen 9000;\n", "doc.md:7: run.sh: no :8000 (the gateway) in it", []docPort{{"8000", "the gateway", "1"}}},
		{"two commands", "a\nb\n", `doc.md:7: run.sh: want one command, found 2: ["a" "b"]`, nil},
		{"no command", "# only a comment\n\n", "doc.md:7: run.sh: want one command, found 0", nil},
		{"dangling continuation", "a \\\n", `doc.md:7: run.sh: its last line ends in '\'`, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := docBlock{doc: "doc.md", line: 7, name: "run.sh", text: tt.text}
			text, err := b.withPorts(tt.ports...)
			if err == nil {
				_, err = b.command(text)
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("error %v, want %q", err, tt.err)
			}
		})
	}
}
