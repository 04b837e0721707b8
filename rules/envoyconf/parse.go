package envoyconf

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

var yamlLine = regexp.MustCompile(`^line (\d+): (.*)$`)

// decode parses a file's YAML: its one document, or nil for an empty file.
func decode(data []byte) (doc *yaml.Node, second int, err error) {
	defer func() {
		if r := recover(); r != nil { // a parser bug must not take the caller down
			doc, err = nil, fmt.Errorf("the YAML parser failed: %v", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var d yaml.Node
	if err := dec.Decode(&d); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, 0, nil
		}
		return nil, 0, err
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		second = max(extra.Line, 1)
	case !errors.Is(err, io.EOF):
		return nil, 0, err
	}
	return &d, second, nil
}

// badText finds what the YAML parser refuses without saying where: bytes
// that are not UTF-8, and control characters. It returns the line and why.
func badText(data []byte) (int, string) {
	line := 1
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			return line, "is not valid UTF-8"
		case r == '\n':
			line++
		case r < 0x20 && r != '\t' && r != '\r', r == 0x7f, r >= 0x80 && r < 0xa0 && r != 0x85, r == 0xfffe, r == 0xffff:
			return line, fmt.Sprintf("control character %U is not allowed in YAML", r)
		}
		i += size
	}
	return 0, ""
}

// file reads one file into a tree.
func (im *importer) file(f File) {
	loc := Location{File: f.Name}
	if len(f.Data) > MaxFileSize {
		im.fail(loc, "file is %d bytes; at most %d", len(f.Data), MaxFileSize)
		return
	}
	if line, msg := badText(f.Data); line > 0 {
		loc.Line = line
		im.fail(loc, "%s", msg)
		return
	}
	doc, second, err := decode(f.Data)
	if err != nil {
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			loc.Line, _ = strconv.Atoi(m[1])
			msg = m[2]
		} else if strings.Contains(msg, "end of stream") {
			loc.Line = bytes.Count(f.Data, []byte("\n")) + 1
		}
		im.fail(loc, "%s", msg)
		return
	}
	if second > 0 {
		loc.Line = second
		im.fail(loc, "holds more than one YAML document; ratelimit reads only the first: put each domain in a file of its own")
		return
	}
	var root *yaml.Node
	if doc != nil && len(doc.Content) > 0 {
		root = deref(doc.Content[0])
	}
	if root == nil || isNull(root) {
		loc.Line = 1
		im.fail(loc, "file is empty: want a domain: and its descriptors:")
		return
	}
	loc = loc.at(root)
	if root.Kind != yaml.MappingNode {
		im.fail(loc, "want a mapping with domain: and descriptors:, got %s", kindName(root))
		return
	}
	t := &tree{loc: loc, root: &node{loc: loc}}
	var descs *yaml.Node
	var descsLoc Location
	domainSeen, domainOK := false, false
	for _, kv := range im.fields(loc, root, 0) {
		floc := loc.at(kv.key)
		switch kv.name {
		case "domain":
			domainSeen = true
			t.loc = floc
			t.domain, domainOK = im.str(floc.field("domain"), kv.val)
		case "descriptors":
			descs, descsLoc = kv.val, floc
		default:
			im.unknown(floc, kv.name, topFields)
		}
	}
	switch {
	case domainSeen && !domainOK:
		return
	case t.domain == "" && domainSeen:
		im.fail(t.loc.field("domain"), "is empty; ratelimit needs a domain (the domain Envoy sends)")
		return
	case t.domain == "":
		im.fail(loc, "domain: is missing; ratelimit needs a domain (the domain Envoy sends)")
		return
	case len(t.domain) > maxStringLen:
		im.fail(t.loc.field("domain"), "is %d bytes; Allot matches domains of at most %d", len(t.domain), maxStringLen)
		return
	}
	t.loc.Domain = t.domain
	if first, dup := im.domains[t.domain]; dup {
		im.fail(t.loc, "is also the domain of %s:%d; ratelimit refuses one domain in two files (unless MERGE_DOMAIN_CONFIG is set): merge them into one file", first.File, first.Line)
		return
	}
	im.domains[t.domain] = t.loc
	t.root.loc = Location{File: f.Name, Line: t.loc.Line, Domain: t.domain}
	descsLoc.Domain = t.domain
	im.descriptors(t.root, descsLoc, descs, "descriptors")
	im.trees = append(im.trees, t)
}

// descriptors reads a descriptors: list into parent's children.
func (im *importer) descriptors(parent *node, loc Location, list *yaml.Node, path string) {
	list = deref(list)
	if list == nil || isNull(list) {
		return
	}
	loc.Path = path
	if list.Kind != yaml.SequenceNode {
		im.fail(loc.at(list), "want a list of descriptors, got %s", kindName(list))
		return
	}
	seen := map[string]Location{}
	for i, item := range list.Content {
		if im.over || !im.spend(loc, 1) {
			return
		}
		ipath := fmt.Sprintf("%s[%d]", path, i)
		n := im.descriptor(parent, Location{File: loc.File, Domain: loc.Domain, Path: ipath}, item)
		if n == nil {
			continue
		}
		if n.key != "" {
			fk := n.finalKey()
			if first, dup := seen[fk]; dup {
				im.fail(n.loc, "duplicate descriptor %q (also %s at line %d); ratelimit refuses two descriptors with the same key and value under one parent", fk, first.Path, first.Line)
				continue
			}
			seen[fk] = n.loc
		}
		parent.children = append(parent.children, n)
	}
}

// descriptor reads one descriptor and, recursively, its descriptors.
func (im *importer) descriptor(parent *node, loc Location, item *yaml.Node) *node {
	item = deref(item)
	loc = loc.at(item)
	im.count++
	if im.count > MaxDescriptors {
		im.fail(loc, "more than %d descriptors (YAML aliases expanded); import them in parts", MaxDescriptors)
		im.over = true
		return nil
	}
	if item == nil || item.Kind != yaml.MappingNode {
		im.fail(loc, "want a descriptor (a mapping with key:), got %s", kindName(item))
		return nil
	}
	n := &node{loc: loc, parent: parent, depth: parent.depth + 1}
	if n.depth > maxNesting {
		im.fail(loc, "descriptors nested more than %d deep", maxNesting)
		im.over = true
		return nil
	}
	var children *yaml.Node
	var childrenLoc Location
	keyGiven, keyOK := false, false
	keyLoc, valueLoc := loc.field("key"), loc.field("value")
	for _, kv := range im.fields(loc, item, 0) {
		floc := loc.at(kv.key).field(kv.name)
		switch kv.name {
		case "key":
			keyGiven, keyLoc = true, floc
			n.key, keyOK = im.str(floc, kv.val)
		case "value":
			valueLoc = floc
			n.value, _ = im.str(floc, kv.val)
		case "rate_limit":
			n.lim = im.rateLimit(floc, kv.val)
		case "descriptors":
			children, childrenLoc = kv.val, floc
		case "shadow_mode":
			n.shadow, _ = im.boolean(floc, kv.val)
			n.shadowLoc = floc
		case "quota_mode":
			n.quota, _ = im.boolean(floc, kv.val)
			n.quotaLoc = floc
		case "share_threshold":
			n.share, _ = im.boolean(floc, kv.val)
			n.shareLoc = floc
		case "detailed_metric", "value_to_metric":
			if b, _ := im.boolean(floc, kv.val); b {
				n.metricsFields = append(n.metricsFields, kv.name)
			}
		case "metadata":
			n.metadataLoc = floc
			switch v := deref(kv.val); {
			case v == nil || isNull(v):
			case v.Kind == yaml.MappingNode:
				n.metadata = len(v.Content) > 0
			default:
				im.fail(floc, "want a mapping, got %s", kindName(v))
			}
		default:
			im.unknown(loc.at(kv.key), kv.name, descriptorFields)
		}
	}
	switch {
	case !keyGiven:
		im.fail(loc, "key: is missing; ratelimit needs every descriptor's key")
	case n.key == "" && keyOK:
		im.fail(keyLoc, "is empty; ratelimit needs every descriptor's key")
	case len(n.key) > maxStringLen:
		im.fail(keyLoc, "is %d bytes; Allot matches keys of at most %d", len(n.key), maxStringLen)
	case strings.Contains(n.key, "*"):
		im.fail(keyLoc, "%q: ratelimit reads a '*' in a key as a wildcard over the key and value together; Allot matches keys exactly", n.key)
	}
	switch {
	case len(n.value) > maxStringLen:
		im.fail(valueLoc, "is %d bytes; Allot matches values of at most %d", len(n.value), maxStringLen)
	case strings.Contains(strings.TrimSuffix(n.value, "*"), "*"):
		im.fail(valueLoc, "%q: ratelimit matches a '*' inside a value as a glob; Allot matches an exact value, any value, or a prefix (one '*' at the end)", n.value)
	}
	im.descriptors(n, childrenLoc, children, loc.Path+".descriptors")
	return n
}

// rateLimit reads a rate_limit: mapping.
func (im *importer) rateLimit(loc Location, v *yaml.Node) *limit {
	v = deref(v)
	if v == nil || isNull(v) {
		im.warn(loc, "is empty, which ratelimit reads as no rate limit")
		return nil
	}
	if v.Kind != yaml.MappingNode {
		im.fail(loc, "want a mapping (unit:, requests_per_unit:), got %s", kindName(v))
		return nil
	}
	l := &limit{loc: loc}
	var unit string
	var unitLoc, perUnitLoc Location
	unitSeen, perUnitSeen, unitOK, perUnitOK := false, false, true, true
	for _, kv := range im.fields(loc, v, 0) {
		floc := loc.at(kv.key).field(kv.name)
		switch kv.name {
		case "unit":
			unitSeen, unitLoc = true, floc
			unit, unitOK = im.str(floc, kv.val)
		case "requests_per_unit":
			perUnitSeen, perUnitLoc = true, floc
			l.perUnit, perUnitOK = im.count32(floc, kv.val)
		case "unlimited":
			l.unlimited, _ = im.boolean(floc, kv.val)
		case "name":
			l.name, _ = im.str(floc, kv.val)
			l.nameLoc = floc
		case "replaces":
			l.replaces = im.replaces(floc, kv.val)
		default:
			im.unknown(loc.at(kv.key), kv.name, rateLimitFields)
		}
	}
	if l.unlimited {
		if unitSeen && unit != "" {
			im.fail(unitLoc, "an unlimited rate limit has no unit (ratelimit refuses one)")
		}
		if perUnitSeen && l.perUnit != 0 {
			im.fail(perUnitLoc, "an unlimited rate limit has no requests_per_unit")
		}
		l.perUnit = 0
	} else {
		d, ok := units[strings.ToUpper(unit)]
		switch {
		case !unitSeen:
			im.fail(loc, "unit: is missing (want %s)", unitNames)
		case !ok && unitOK:
			im.fail(unitLoc, "invalid rate limit unit %q (want %s)", unit, unitNames)
		}
		l.period = d
		switch {
		case !perUnitSeen:
			im.fail(loc, "requests_per_unit: is missing; ratelimit reads that as 0, a ban, and an Allot limit must be positive")
		case l.perUnit == 0 && perUnitOK:
			im.fail(perUnitLoc, "is 0: ratelimit refuses every request it matches (a ban); an Allot limit must be positive, so block these in Envoy instead")
		}
	}
	for _, r := range l.replaces {
		if l.name != "" && r.name == l.name {
			im.fail(r.loc, "%q is this rate limit's own name; ratelimit refuses a limit that replaces itself", r.name)
		}
	}
	return l
}

// replaces reads a replaces: list of {name: ...}.
func (im *importer) replaces(loc Location, v *yaml.Node) []ref {
	v = deref(v)
	if v == nil || isNull(v) {
		return nil
	}
	if v.Kind != yaml.SequenceNode {
		im.fail(loc, "want a list of {name: NAME}, got %s", kindName(v))
		return nil
	}
	var out []ref
	for i, item := range v.Content {
		if !im.spend(loc, 1) {
			return out
		}
		iloc := loc
		iloc.Path = fmt.Sprintf("%s[%d]", loc.Path, i)
		item = deref(item)
		iloc = iloc.at(item)
		if item == nil || item.Kind != yaml.MappingNode {
			im.fail(iloc, "want {name: NAME}, got %s", kindName(item))
			continue
		}
		r := ref{loc: iloc}
		for _, kv := range im.fields(iloc, item, 0) {
			if kv.name != "name" {
				im.unknown(iloc.at(kv.key), kv.name, replacesFields)
				continue
			}
			r.name, _ = im.str(iloc.at(kv.key).field("name"), kv.val)
		}
		if r.name == "" {
			im.fail(iloc, "name is empty; ratelimit refuses an empty replaces entry")
			continue
		}
		out = append(out, r)
	}
	return out
}

// The fields ratelimit reads, by where they belong.
var (
	topFields        = []string{"domain", "descriptors"}
	descriptorFields = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode", "detailed_metric", "quota_mode", "value_to_metric", "share_threshold", "metadata"}
	rateLimitFields  = []string{"unit", "requests_per_unit", "unlimited", "name", "replaces"}
	replacesFields   = []string{"name"}
)

// unknown reports a field that does not belong where it is.
func (im *importer) unknown(loc Location, name string, here []string) {
	hint := ""
	norm := func(s string) string { return strings.ToLower(strings.NewReplacer("_", "", "-", "").Replace(s)) }
	for _, f := range here {
		if norm(f) == norm(name) {
			hint = fmt.Sprintf(" (did you mean %s?)", f)
		}
	}
	if hint == "" {
		switch {
		case slices.Contains(rateLimitFields, name):
			hint = " (it belongs in a descriptor's rate_limit:)"
		case slices.Contains(descriptorFields, name):
			hint = " (it belongs in a descriptor, under descriptors:)"
		case name == "domain":
			hint = " (it belongs at the top of the file)"
		}
	}
	im.fail(loc, "unknown field %q%s", name, hint)
}

type kv struct {
	name     string
	key, val *yaml.Node
}

// fields lists a mapping's fields, with YAML merge keys (<<) applied and
// a field given twice refused.
func (im *importer) fields(loc Location, m *yaml.Node, depth int) []kv {
	var out []kv
	seen := map[string]int{}
	var merges []*yaml.Node
	for i := 0; i+1 < len(m.Content); i += 2 {
		if !im.spend(loc, 1) {
			return out
		}
		k, v := deref(m.Content[i]), m.Content[i+1]
		if k == nil || k.Kind != yaml.ScalarNode {
			im.fail(loc.at(m.Content[i]), "field names must be plain strings, got %s", kindName(k))
			continue
		}
		if k.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		if first, dup := seen[k.Value]; dup {
			im.fail(loc.at(k), "field %q is given twice (first at line %d)", k.Value, first)
			continue
		}
		seen[k.Value] = k.Line
		out = append(out, kv{k.Value, k, v})
	}
	if len(merges) == 0 {
		return out
	}
	if depth >= 8 {
		im.fail(loc, "YAML merge keys (<<) nested more than 8 deep")
		return out
	}
	var sources []*yaml.Node
	for _, v := range merges {
		v = deref(v)
		if v != nil && v.Kind == yaml.SequenceNode {
			for _, s := range v.Content {
				sources = append(sources, deref(s))
			}
		} else {
			sources = append(sources, v)
		}
	}
	for _, s := range sources {
		if s == nil || s.Kind != yaml.MappingNode {
			im.fail(loc.at(s), "a merge key (<<) must name a mapping, got %s", kindName(s))
			continue
		}
		for _, f := range im.fields(loc, s, depth+1) {
			if _, dup := seen[f.name]; !dup {
				seen[f.name] = f.key.Line
				out = append(out, f)
			}
		}
	}
	return out
}

// spend takes n YAML nodes from the budget, reporting once when it runs out.
func (im *importer) spend(loc Location, n int) bool {
	if im.budget < n {
		if !im.over {
			im.fail(loc, "the files hold more than %d YAML nodes (aliases expanded); import them in parts", maxNodes)
			im.over = true
		}
		return false
	}
	im.budget -= n
	return true
}

func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode; i++ {
		if i > 64 {
			return nil
		}
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

func kindName(n *yaml.Node) string {
	switch {
	case n == nil:
		return "nothing"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Kind == yaml.ScalarNode && isNull(n):
		return "null"
	case n.Kind == yaml.ScalarNode:
		return fmt.Sprintf("%s %q", strings.TrimPrefix(n.ShortTag(), "!!"), n.Value)
	}
	return "a YAML node of kind " + strconv.Itoa(int(n.Kind))
}

// str reads a string as ratelimit's YAML decoder does: any scalar is its
// text, null is empty.
func (im *importer) str(loc Location, v *yaml.Node) (string, bool) {
	v = deref(v)
	if v == nil || v.Kind != yaml.ScalarNode {
		im.fail(loc, "want a string, got %s", kindName(v))
		return "", false
	}
	if isNull(v) {
		return "", true
	}
	if v.ShortTag() == "!!binary" || !utf8.ValidString(v.Value) {
		im.fail(loc, "want a string, got %s", kindName(v))
		return "", false
	}
	return v.Value, true
}

func (im *importer) boolean(loc Location, v *yaml.Node) (bool, bool) {
	v = deref(v)
	if v != nil && isNull(v) {
		return false, true
	}
	var b bool
	if v == nil || v.Kind != yaml.ScalarNode || v.Decode(&b) != nil {
		im.fail(loc, "want true or false, got %s", kindName(v))
		return false, false
	}
	return b, true
}

// count32 reads requests_per_unit: a whole number that fits ratelimit's
// uint32.
func (im *importer) count32(loc Location, v *yaml.Node) (int64, bool) {
	v = deref(v)
	if v != nil && isNull(v) {
		return 0, true
	}
	var n int64
	if v == nil || v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" || v.Decode(&n) != nil {
		im.fail(loc, "want a whole number of requests, got %s", kindName(v))
		return 0, false
	}
	switch {
	case n < 0:
		im.fail(loc, "must not be negative, got %d", n)
		return 0, false
	case n > 1<<32-1:
		im.fail(loc, "must be at most %d (ratelimit's limit), got %d", int64(1<<32-1), n)
		return 0, false
	}
	return n, true
}
