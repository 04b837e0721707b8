package envoyconf

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
	"go.yaml.in/yaml/v3"
)

// Source names what Import reads, in descriptions and messages.
const Source = "envoyproxy/ratelimit"

// File is one envoyproxy/ratelimit configuration file.
type File struct {
	Name string // in errors, warnings and rule descriptions
	Data []byte
}

// Options change what Import makes of a configuration.
type Options struct {
	// Intent is every imported limit's intent; zero means capacity.
	Intent lease.Intent
	// Shadow makes every imported limit a shadow rule, as ratelimit's
	// SHADOW_MODE setting does for a whole server: a way to try the
	// rules on live traffic before they refuse anything.
	Shadow bool
}

// Limits on what Import reads, so that a mistaken or hostile file cannot
// make it run without bound.
const (
	// MaxFileSize bounds each file, as rules.MaxFileSize bounds a rules file.
	MaxFileSize = rules.MaxFileSize
	// MaxDescriptors bounds the descriptors of all files together, every
	// YAML alias expanded.
	MaxDescriptors = 100_000
	// maxNesting bounds how deep descriptors are read; rules come only
	// from the first rules.MaxDescriptorEntries levels.
	maxNesting = 64
	// maxNodes bounds the YAML nodes read, aliases expanded.
	maxNodes = 10_000_000
	// maxDescriptionLen is rules' limit on a description.
	maxDescriptionLen = 1024
	// maxStringLen is rules' limit on a domain, key or value.
	maxStringLen = 256
	// maxReplaces is rules' limit on a replaces list.
	maxReplaces = 1000
)

// ErrInvalid is wrapped by every error Import returns about its input.
var ErrInvalid = errors.New("envoyconf: invalid")

// Location is a place in a configuration file.
type Location struct {
	File   string
	Line   int    // 0 when unknown
	Domain string // the file's domain, once known
	// Path is where in the domain: descriptors[0].descriptors[1], and a
	// field of it: descriptors[0].rate_limit.unit.
	Path string
}

// String writes the location as file:line: domain D: path.
func (l Location) String() string {
	var parts []string
	if l.File != "" || l.Line > 0 {
		s := l.File
		if l.Line > 0 {
			s += ":" + strconv.Itoa(l.Line)
		}
		parts = append(parts, s)
	}
	if l.Domain != "" {
		parts = append(parts, "domain "+l.Domain)
	}
	if l.Path != "" {
		parts = append(parts, l.Path)
	}
	return strings.Join(parts, ": ")
}

func (l Location) field(name string) Location {
	if l.Path != "" {
		name = l.Path + "." + name
	}
	l.Path = name
	return l
}

func (l Location) at(n *yaml.Node) Location {
	if n != nil && n.Line > 0 {
		l.Line = n.Line
	}
	return l
}

// Error is a problem with a configuration: something it says wrongly, or
// something Allot cannot do as ratelimit does.
type Error struct {
	Location
	Msg string
}

func (e *Error) Error() string { return "envoyconf: " + e.Location.String() + ": " + e.Msg }

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *Error) Unwrap() error { return ErrInvalid }

// Errors is every problem found.
type Errors []*Error

func (es Errors) Error() string {
	msgs := make([]string, len(es))
	for i, e := range es {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "\n")
}

// Unwrap returns the individual errors, for errors.Is and errors.As.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// Warning is something imported that does not mean quite what it meant to
// ratelimit, or that had no effect there and is left out.
type Warning struct {
	Location
	Msg string
}

func (w Warning) String() string { return w.Location.String() + ": " + w.Msg }

// units are ratelimit's units and the windows it counts them in
// (utils.UnitToDivider): a month is 30 days, a year 365.
var units = map[string]time.Duration{
	"SECOND": time.Second,
	"MINUTE": time.Minute,
	"HOUR":   time.Hour,
	"DAY":    24 * time.Hour,
	"WEEK":   7 * 24 * time.Hour,
	"MONTH":  30 * 24 * time.Hour,
	"YEAR":   365 * 24 * time.Hour,
}

const unitNames = "second, minute, hour, day, week, month or year"

// limit is a descriptor's rate_limit.
type limit struct {
	loc       Location
	unlimited bool
	perUnit   int64
	period    time.Duration
	name      string
	nameLoc   Location
	replaces  []ref
}

// ref is one replaces entry.
type ref struct {
	name string
	loc  Location
}

// node is a descriptor, or a domain's root.
type node struct {
	loc        Location
	parent     *node
	depth      int // 1 for a top-level descriptor
	key, value string
	lim        *limit
	children   []*node

	shadow        bool
	shadowLoc     Location
	quota         bool
	quotaLoc      Location
	share         bool
	shareLoc      Location
	metadata      bool
	metadataLoc   Location
	metricsFields []string // detailed_metric, value_to_metric set true

	dead    bool  // a wildcard an earlier one always matches first
	hasRule bool  // a rule comes from it or below it
	blocks  *node // the more general sibling its unlimited rule keeps out
}

// finalKey is ratelimit's name for a descriptor among its siblings.
func (n *node) finalKey() string {
	if n.value == "" {
		return n.key
	}
	return n.key + "_" + n.value
}

func (n *node) prefix() (string, bool) { return strings.CutSuffix(n.value, "*") }

type tree struct {
	domain string
	loc    Location
	root   *node
}

type importer struct {
	opts    Options
	errs    Errors
	warns   []Warning
	budget  int // YAML nodes left to read
	count   int // descriptors read
	domains map[string]Location
	trees   []*tree
	over    bool // a limit on size was reached: stop reading
}

func (im *importer) fail(loc Location, format string, args ...any) {
	im.errs = append(im.errs, &Error{Location: loc, Msg: fmt.Sprintf(format, args...)})
}

func (im *importer) warn(loc Location, format string, args ...any) {
	im.warns = append(im.warns, Warning{Location: loc, Msg: fmt.Sprintf(format, args...)})
}

// Import reads envoyproxy/ratelimit configuration files and returns the
// Allot rules that limit the same descriptors the same way, in the order
// of the files and of the descriptors in them, and the warnings met. Every
// problem is reported, each an *Error naming the file, line, domain and
// descriptor, as one Errors; the warnings may then be incomplete. Rules
// returned pass rules.NewSet.
func Import(files []File, opts Options) ([]rules.Rule, []Warning, error) {
	if opts.Intent == 0 {
		opts.Intent = lease.Capacity
	}
	if _, err := opts.Intent.MarshalText(); err != nil {
		return nil, nil, fmt.Errorf("envoyconf: %w", err)
	}
	im := &importer{opts: opts, budget: maxNodes, domains: map[string]Location{}}
	for _, f := range files {
		if im.over {
			break
		}
		im.file(f)
	}
	if len(im.errs) > 0 {
		return nil, im.warns, im.errs
	}
	for _, t := range im.trees {
		im.check(t)
	}
	if len(im.errs) > 0 {
		return nil, im.warns, im.errs
	}
	out := im.build()
	if len(im.errs) > 0 {
		return nil, im.warns, im.errs
	}
	return out, im.warns, nil
}
