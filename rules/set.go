package rules

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Set is a validated rule set, ordered for evaluation: by scope, cheapest
// first (global, ip, tenant, user, route), then by name. It is immutable.
type Set struct {
	version uint64
	rules   []Rule
}

// NewSet validates rules and returns them as a Set. Every problem found is
// reported, each naming its rule and field.
func NewSet(version uint64, rules []Rule) (*Set, error) {
	var errs Errors
	seen := make(map[string]int, len(rules))
	for i := range rules {
		r := &rules[i]
		for _, e := range r.Validate() {
			if e.Rule == "" {
				e.Rule = fmt.Sprintf("#%d", i+1)
			}
			errs = append(errs, e)
		}
		if r.Name == "" {
			continue
		}
		if first, dup := seen[r.Name]; dup {
			errs = append(errs, &Error{Rule: r.Name, Field: "name", Msg: fmt.Sprintf("duplicate rule name (first defined as rule #%d)", first+1)})
		} else {
			seen[r.Name] = i
		}
	}
	errs = append(errs, checkDescriptorSet(rules, seen)...)
	if len(errs) > 0 {
		return nil, errs
	}
	ordered := slices.Clone(rules)
	slices.SortStableFunc(ordered, func(a, b Rule) int {
		if c := cmp.Compare(a.Scope, b.Scope); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	return &Set{version: version, rules: ordered}, nil
}

// Version is the set's version: it increases with every change.
func (s *Set) Version() uint64 {
	if s == nil {
		return 0
	}
	return s.version
}

// Rules returns the rules in evaluation order. The slice must not be
// modified.
func (s *Set) Rules() []Rule {
	if s == nil {
		return nil
	}
	return s.rules
}

// Len is the number of rules.
func (s *Set) Len() int { return len(s.Rules()) }

// Get returns the rule with the given name.
func (s *Set) Get(name string) (Rule, bool) {
	for _, r := range s.Rules() {
		if r.Name == name {
			return r, true
		}
	}
	return Rule{}, false
}

// SameRules reports whether s and o hold equal rules (Equal, rule by
// rule), whatever their versions.
func (s *Set) SameRules(o *Set) bool {
	a, b := s.Rules(), o.Rules()
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !Equal(&a[i], &b[i]) {
			return false
		}
	}
	return true
}

// checkDescriptorSet finds what only the whole set shows: two descriptor
// rules matching the same descriptors (which would apply is undefined),
// and replaces naming no rule.
func checkDescriptorSet(rs []Rule, names map[string]int) Errors {
	var errs Errors
	type match struct{ domain, entries string }
	first := map[match]string{}
	for i := range rs {
		r := &rs[i]
		if r.Scope != Descriptor || r.Name == "" {
			continue
		}
		var b strings.Builder
		for _, e := range r.Match.Descriptors {
			fmt.Fprintf(&b, "%d:%s=%d:%s;", len(e.Key), e.Key, len(e.Value), e.Value)
		}
		m := match{r.Match.Domain, b.String()}
		if other, dup := first[m]; dup {
			errs = append(errs, &Error{Rule: r.Name, Field: "match.descriptors", Msg: fmt.Sprintf("rule %s matches the same domain and descriptors; which would apply is undefined", other)})
		} else {
			first[m] = r.Name
		}
		for j, name := range r.Replaces {
			if _, ok := names[name]; !ok {
				errs = append(errs, &Error{Rule: r.Name, Field: fmt.Sprintf("replaces[%d]", j), Msg: fmt.Sprintf("%q names no rule of the set", name)})
			}
		}
	}
	return errs
}
