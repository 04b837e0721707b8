// Package rulestest draws random valid rules, for property tests of the
// code that carries rules: the rules-file writer and reader, the wire
// conversion (proto/rulespb), and what bills by them.
//
// It is a package of its own, not a _test.go file, because those tests
// live in several packages and must agree on what a valid rule is: one
// generator, covering every field a rule file can set (descriptor and
// unlimited rules, plans, tenant overrides, regions, names YAML must
// quote), means a field added to the model and forgotten by one of them
// is found by all. Only tests import it.
package rulestest
