// Package rules is Allot's rule model: what a limit says, how rule files
// are read, and how a rule set is validated and ordered.
//
// A rule names the requests it covers (its scope and key), the algorithm
// and numbers of its limit, and its intent — capacity, quota or abuse —
// which decides its tolerance and what it does when the coordinator is out
// of reach. The coordinator stores rule sets and serves them; the agent
// enforces them; `allot rules validate` checks a file offline. All three
// use this package, so a rule is valid in one exactly when it is in the
// others.
//
// Rule files are YAML read strictly: an unknown field, a missing limit, a
// negative period or a duplicate name is an error that names the file, the
// line and the field.
package rules
