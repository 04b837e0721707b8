package envoyconf

import (
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/rules"
)

// check validates what depends on a whole tree, drops the wildcards
// ratelimit never reaches, and finds the descriptors that need an
// unlimited rule.
func (im *importer) check(t *tree) {
	im.prune(t.root)
	im.mark(t.root)
	im.checkNode(t.root)
	if !t.root.hasRule {
		im.warn(t.loc, "no descriptor here has a rate_limit, so no rules")
	}
}

// prune marks dead the wildcards that ratelimit never reaches: it tries a
// parent's wildcards in file order, so a later one whose every value an
// earlier, shorter one matches is never used.
func (im *importer) prune(n *node) {
	earlier := map[entryKey]*node{} // wildcards by key and prefix
	for _, c := range n.children {
		p, ok := c.prefix()
		if !ok {
			continue
		}
		for i := len(p); i >= 0; i-- {
			if w := earlier[entryKey{c.key, p[:i]}]; w != nil {
				c.dead = true
				im.warn(c.loc, "value %q is never used as a wildcard: ratelimit tries wildcards in file order, and %q (line %d) before it matches every value it does; not imported", c.value, w.value, w.loc.Line)
				break
			}
		}
		if _, dup := earlier[entryKey{c.key, p}]; !dup {
			earlier[entryKey{c.key, p}] = c
		}
	}
	for _, c := range n.children {
		if !c.dead {
			im.prune(c)
		}
	}
}

// mark sets hasRule, bottom up.
func (im *importer) mark(n *node) {
	n.hasRule = n.lim != nil
	for _, c := range n.children {
		if c.dead {
			continue
		}
		im.mark(c)
		n.hasRule = n.hasRule || c.hasRule
	}
}

type entryKey struct{ key, value string }

// general indexes a descriptor's children that have rules below them and
// match more than one value: those with any value by key, and wildcards
// by key and prefix.
type general struct {
	any    map[string]*node
	prefix map[entryKey]*node
}

func (im *importer) checkNode(n *node) {
	g := general{any: map[string]*node{}, prefix: map[entryKey]*node{}}
	for _, c := range n.children {
		if c.dead || !c.hasRule {
			continue
		}
		if p, ok := c.prefix(); ok {
			g.prefix[entryKey{c.key, p}] = c
		} else if c.value == "" {
			g.any[c.key] = c
		}
	}
	for _, c := range n.children {
		if c.dead {
			continue
		}
		im.checkDescriptor(c, &g)
		im.checkNode(c)
	}
}

// moreGeneral finds a sibling with rules below it that matches some of
// the values n matches and that ratelimit tries after n: a wildcard with
// a shorter prefix of n's value, or any value.
func (g *general) moreGeneral(n *node) *node {
	v, isPrefix := n.prefix()
	if n.value == "" {
		return nil
	}
	i := len(v)
	if isPrefix {
		i-- // only a shorter prefix is tried after n
	}
	for ; i >= 0; i-- {
		if s := g.prefix[entryKey{n.key, v[:i]}]; s != nil {
			return s
		}
	}
	return g.any[n.key]
}

// checkDescriptor refuses what Allot cannot do, warns of what it does
// differently, and decides whether the descriptor needs an unlimited rule.
func (im *importer) checkDescriptor(n *node, siblings *general) {
	if n.lim != nil && n.depth > rules.MaxDescriptorEntries {
		im.fail(n.loc, "is %d descriptors deep; an Allot descriptor rule matches at most %d entries", n.depth, rules.MaxDescriptorEntries)
	}
	if n.quota {
		if n.lim != nil {
			im.fail(n.quotaLoc, "ratelimit refuses a request only when every quota_mode descriptor of it is over its limit; Allot decides each rule on its own, so it cannot import quota_mode")
		} else {
			im.warn(n.quotaLoc, "has no effect without a rate_limit; ignored")
		}
	}
	if n.metadata {
		if n.lim != nil {
			im.fail(n.metadataLoc, "ratelimit returns it to Envoy as dynamic metadata; Allot returns none. Remove it to import the limit without it")
		} else {
			im.warn(n.metadataLoc, "has no effect without a rate_limit; ignored")
		}
	}
	if n.share {
		switch {
		case !strings.Contains(n.finalKey(), "*"):
			im.fail(n.shareLoc, "applies only to a wildcard value (ratelimit refuses it on %q)", n.finalKey())
		case subtreeLimited(n):
			im.fail(n.shareLoc, "ratelimit counts every value matching %q in one counter; an Allot rule counts each value on its own, so it cannot import share_threshold", n.value)
		default:
			im.warn(n.shareLoc, "has no effect: no limit below it counts")
		}
	}
	switch {
	case n.shadow && n.lim == nil:
		im.warn(n.shadowLoc, "has no effect without a rate_limit; ignored")
	case n.shadow && n.lim.unlimited:
		im.warn(n.shadowLoc, "has no effect on an unlimited rate limit; ignored")
	}
	if len(n.metricsFields) > 0 {
		im.warn(n.loc, "%s only names ratelimit's metrics by value: Allot's metrics (allot_agent_decisions_total) and usage ledger (allot usage --rule) count per rule, not per value; the limit is imported unchanged", strings.Join(n.metricsFields, " and "))
	}
	if n.hasRule {
		return
	}
	// ratelimit stops at n for what n matches, and applies nothing; the
	// agent, which sees only rules, would go on to a more general sibling
	// that has rules. An unlimited rule here keeps it out.
	// g has a rule no deeper than n, so n is not too deep for one.
	n.blocks = siblings.moreGeneral(n)
}

func subtreeLimited(n *node) bool {
	if n.lim != nil && !n.lim.unlimited {
		return true
	}
	for _, c := range n.children {
		if !c.dead && subtreeLimited(c) {
			return true
		}
	}
	return false
}

// item is a rule to make: from a descriptor's rate_limit, or an unlimited
// rule for a descriptor without one.
type item struct {
	t *tree
	n *node
}

// build makes the rules, names them, and resolves replaces.
func (im *importer) build() []rules.Rule {
	var items []item
	for _, t := range im.trees {
		var walk func(n *node)
		walk = func(n *node) {
			for _, c := range n.children {
				if c.dead {
					continue
				}
				if c.lim != nil || c.blocks != nil {
					items = append(items, item{t, c})
				}
				if c.hasRule {
					walk(c)
				}
			}
		}
		walk(t.root)
	}
	names := im.name(items)
	// ratelimit names need not be unique; a replaces entry drops every
	// limit of the name. Within a domain, for a request has one domain.
	byName := map[string]map[string][]string{}
	for i, it := range items {
		if it.n.lim == nil || it.n.lim.name == "" {
			continue
		}
		m := byName[it.t.domain]
		if m == nil {
			m = map[string][]string{}
			byName[it.t.domain] = m
		}
		m[it.n.lim.name] = append(m[it.n.lim.name], names[i])
	}
	out := make([]rules.Rule, 0, len(items))
	for i, it := range items {
		r := rules.Rule{
			Name:  names[i],
			Scope: rules.Descriptor,
			Match: rules.Match{Domain: it.t.domain, Descriptors: entries(it.n)},
		}
		switch l := it.n.lim; {
		case l == nil:
			r.Unlimited = true
			g := it.n.blocks
			r.Description = description(fmt.Sprintf("Imported from %s %s:%d, domain %s, %s, which has no rate limit: ratelimit applies none to what it matches, and this unlimited rule keeps the more general %s (line %d) out.",
				Source, it.n.loc.File, it.n.loc.Line, it.t.domain, it.n.loc.Path, g.loc.Path, g.loc.Line))
		default:
			r.Description = description(fmt.Sprintf("Imported from %s %s:%d, domain %s, %s.", Source, it.n.loc.File, it.n.loc.Line, it.t.domain, it.n.loc.Path))
			if l.unlimited {
				r.Unlimited = true
			} else {
				r.Algorithm = algo.FixedWindow
				r.Limit = l.perUnit
				r.Period = l.period
				r.Intent = im.opts.Intent
				r.Shadow = it.n.shadow || im.opts.Shadow
			}
			listed := map[string]bool{}
			for _, ref := range l.replaces {
				targets := byName[it.t.domain][ref.name]
				if len(targets) == 0 {
					im.warn(ref.loc, "no rate limit in domain %s is named %q, so this has no effect; left out", it.t.domain, ref.name)
					continue
				}
				for _, name := range targets {
					if !listed[name] {
						listed[name] = true
						r.Replaces = append(r.Replaces, name)
					}
				}
			}
			if len(r.Replaces) > maxReplaces {
				im.fail(l.loc.field("replaces"), "names %d Allot rules; a rule replaces at most %d", len(r.Replaces), maxReplaces)
			}
		}
		out = append(out, r)
	}
	if len(im.errs) > 0 {
		return nil
	}
	// Everything above keeps rules valid; should anything slip through,
	// say where it came from rather than hand on an invalid rule.
	if _, err := rules.NewSet(0, out); err != nil {
		var es rules.Errors
		if !errors.As(err, &es) {
			im.fail(Location{}, "%v", err)
			return nil
		}
		for _, e := range es {
			loc := Location{}
			for i, r := range out {
				if r.Name == e.Rule {
					loc = items[i].n.loc
				}
			}
			im.fail(loc, "the imported rule %s is invalid: %s: %s", e.Rule, e.Field, e.Msg)
		}
		return nil
	}
	return out
}

// entries are the Allot match for a descriptor: its path from the top.
func entries(n *node) []rules.DescriptorEntry {
	out := make([]rules.DescriptorEntry, n.depth)
	for ; n.parent != nil; n = n.parent {
		out[n.depth-1] = rules.DescriptorEntry{Key: n.key, Value: n.value}
	}
	return out
}

// description bounds a description to what rules allow.
func description(s string) string {
	s = strings.ToValidUTF8(s, "?")
	if len(s) <= maxDescriptionLen {
		return s
	}
	cut := maxDescriptionLen - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$`)

// name gives each rule an Allot name, unique across all files: the
// rate_limit's name when it has a valid one no other limit shares, else
// ratelimit's metrics key for the descriptor (domain.key_value.subkey),
// made valid, with a hash of the descriptor's path appended when that is
// too long or taken.
func (im *importer) name(items []item) []string {
	names := make([]string, len(items))
	taken := map[string]bool{}
	uses := map[string][]int{}
	for i, it := range items {
		if l := it.n.lim; l != nil && l.name != "" {
			uses[l.name] = append(uses[l.name], i)
		}
	}
	// Valid names used once keep their name, before anything else takes it.
	for i, it := range items {
		if l := it.n.lim; l != nil && l.name != "" && len(uses[l.name]) == 1 && namePattern.MatchString(l.name) {
			names[i] = l.name
			taken[l.name] = true
		}
	}
	for i, it := range items {
		l := it.n.lim
		if l == nil || l.name == "" || names[i] != "" {
			continue
		}
		names[i] = unique(sanitize(l.name), identity(it), taken, true)
		if others := uses[l.name]; len(others) > 1 {
			var where []string
			for _, j := range others {
				if len(where) == 3 {
					where = append(where, fmt.Sprintf("and %d more", len(others)-4))
					break
				}
				if j != i {
					where = append(where, fmt.Sprintf("%s:%d", items[j].n.loc.File, items[j].n.loc.Line))
				}
			}
			im.warn(l.nameLoc, "%q also names the rate limit at %s; Allot rule names are unique, so this is rule %s, and replaces: naming %q lists each of them", l.name, strings.Join(where, ", "), names[i], l.name)
		} else {
			im.warn(l.nameLoc, "%q is not a valid Allot rule name (1–128 letters, digits, '.', '_', ':' or '-', starting with a letter or digit); this is rule %s", l.name, names[i])
		}
	}
	for i, it := range items {
		if names[i] != "" {
			continue
		}
		parts := []string{it.t.domain}
		var path []*node
		for n := it.n; n.parent != nil; n = n.parent {
			path = append(path, n)
		}
		for j := len(path) - 1; j >= 0; j-- {
			parts = append(parts, path[j].finalKey())
		}
		names[i] = unique(sanitize(strings.Join(parts, ".")), identity(it), taken, false)
	}
	return names
}

// identity is a descriptor's place, distinct for every descriptor: its
// domain and the keys and values on its path.
func identity(it item) string {
	var b strings.Builder
	b.WriteString(it.t.domain)
	for _, e := range entries(it.n) {
		b.WriteString("\x00" + e.Key + "\x01" + e.Value)
	}
	return b.String()
}

// sanitize makes a name valid: every character a rule name cannot have
// becomes '_', and it starts with a letter or digit.
func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == ':' || c == '-') {
			b[i] = '_'
		}
	}
	s = strings.TrimLeftFunc(string(b), func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	})
	if s == "" {
		s = "rule"
	}
	return s
}

// unique returns base if it is a free, valid name (and not forced to
// carry a hash), else base with a hash of id appended.
func unique(base, id string, taken map[string]bool, hashed bool) string {
	if !hashed && len(base) <= 128 && !taken[base] {
		taken[base] = true
		return base
	}
	for salt := 0; ; salt++ {
		h := fnv.New64a()
		h.Write([]byte(id))
		if salt > 0 {
			fmt.Fprintf(h, "\x02%d", salt)
		}
		suffix := fmt.Sprintf("-%08x", uint32(h.Sum64()))
		b := base
		if len(b)+len(suffix) > 128 {
			b = b[:128-len(suffix)]
		}
		if name := b + suffix; !taken[name] {
			taken[name] = true
			return name
		}
	}
}
