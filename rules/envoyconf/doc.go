// Package envoyconf imports envoyproxy/ratelimit configuration files as
// Allot descriptor rules (scope descriptor), for `allot rules import --from
// envoy-ratelimit`. It is pure: YAML in, rules out; it speaks no gRPC.
//
// Each file holds one domain and a tree of descriptors. Every descriptor
// with a rate_limit becomes one rule that matches the domain and the
// entries on the path from the top of the tree to it:
//
//	ratelimit                        Allot rule
//	domain                           match.domain
//	key, value (path from the top)   match.descriptors: [{key, value}, ...]
//	value "" (key only)              value "" (any value)
//	value "foo*"                     value "foo*" (prefix)
//	rate_limit.requests_per_unit     limit, with algorithm fixed_window
//	rate_limit.unit                  period: 1s, 1m, 1h, 24h, 168h (week),
//	                                 720h (month: 30 days), 8760h (year: 365 days)
//	rate_limit.unlimited             unlimited: true
//	rate_limit.name                  name (else generated: domain.key_value.subkey)
//	rate_limit.replaces[].name       replaces: [names]
//	shadow_mode                      shadow: true
//	detailed_metric, value_to_metric accepted, with a warning (metrics only)
//
// ratelimit counts in fixed windows aligned to the Unix epoch, as Allot's
// fixed_window does, so a limit means the same in both.
//
// Which rule applies to a descriptor follows ratelimit's walk down its
// tree (the agent resolves descriptors the same way): at each entry, an
// exact value before a prefix before any value, the walk never going back
// up. ratelimit also stops at a descriptor that has no rate_limit — that
// is how a value is exempted from its key's limit — where Allot, knowing
// only rules, would walk on to a more general sibling. Import keeps
// ratelimit's answer there with an unlimited rule at that descriptor,
// only where a more general sibling would otherwise apply. Of wildcards
// that overlap, ratelimit uses the first in the file and the agent the
// longest; they agree once wildcards that an earlier, shorter one hides
// are dropped, which Import does with a warning.
//
// What Allot cannot do exactly is an error naming the file and line:
// quota_mode, share_threshold, metadata, requests_per_unit 0 (a ban), a
// '*' anywhere but at the end of a value, and trees deeper than
// rules.MaxDescriptorEntries. So is anything ratelimit itself refuses:
// unknown fields, a bad unit, an unlimited limit with a unit, an empty
// replaces name, two descriptors with the same key and value under one
// parent, one domain in two files.
package envoyconf
