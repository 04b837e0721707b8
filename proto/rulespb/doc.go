// Package rulespb converts Allot's rule model (package rules) to and
// from its wire form (allotpb.Rule and allotpb.RuleSet).
//
// The conversion lives here, next to the generated messages, rather than
// in package rules, so that the rule model stays a pure package: the agent's
// library, `allot rules validate` and the billing code use rules without
// linking protobuf, and a change to the wire cannot reach into how a rule
// is read, validated or billed. Package allotpb itself stays the
// generated messages and the protocol's limits; it does not import the
// rule model, so no Allot logic but limits sits under every wire consumer.
//
// FromProto validates as a rules file is validated: a rule arriving over
// the wire is valid exactly when the same rule in a file would be, and an
// error names the rule and the field.
package rulespb
