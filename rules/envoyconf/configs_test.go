package envoyconf

// The configurations the tests import: envoyproxy/ratelimit's own (its
// README and test configurations), each citing its source, and a few of
// this package's own for the cases they do not cover.

// Source: envoyproxy/ratelimit README.md, Example 1, and
// examples/ratelimit/config/config.yaml.
const mongoCPS = `---
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
`

// Source: envoyproxy/ratelimit test/config/basic_config.yaml.
const basicConfig = `# Basic configuration for testing.
domain: test-domain
descriptors:
  # Top level key/value with no default rate limit.
  - key: key1
    value: value1
    descriptors:
      # 2nd level key only with default rate limit.
      - key: subkey1
        rate_limit:
          unit: second
          requests_per_unit: 5

      # 2nd level key/value with limit. Specific override at 2nd level.
      - key: subkey1
        value: subvalue1
        rate_limit:
          unit: second
          requests_per_unit: 10

  # Top level key only with default rate limit.
  - key: key2
    rate_limit:
      unit: minute
      requests_per_unit: 20

  # Top level key/value with limit. Specific override at 1st level.
  - key: key2
    value: value2
    rate_limit:
      unit: minute
      requests_per_unit: 30

  # First level override with no limit. This effectively whitelists the value.
  - key: key2
    value: value3

  - key: key3
    rate_limit:
      unit: hour
      requests_per_unit: 1

  - key: key4
    rate_limit:
      name: key4_rate_limit
      unit: day
      requests_per_unit: 1

  - key: key5
    value: value5
    rate_limit:
      unit: day
      requests_per_unit: 15
    descriptors:
      - key: subkey5
        value: subvalue5
        rate_limit:
          unit: day
          requests_per_unit: 25

  - key: key6
    rate_limit:
      unlimited: true

  # Top level key only with default rate limit.

  - key: key7
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 70
`

// Source: envoyproxy/ratelimit README.md, Example 2.
const messaging = `domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5

  # Only allow 100 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
`

// Source: envoyproxy/ratelimit README.md, Example 4 (the configuration
// that matches).
const example4 = `domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: second
`

// Source: envoyproxy/ratelimit README.md, Example 5.
const internal = `domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true

  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
`

// Source: envoyproxy/ratelimit README.md, Example 6.
const example6 = `domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
`

// Source: envoyproxy/ratelimit README.md, Example 7.
const example7 = `domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
`

// Source: envoyproxy/ratelimit README.md, Example 8.
const example8 = `domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 20
`

// Source: envoyproxy/ratelimit README.md, Example 10.
const example10 = `domain: example10
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit:
              unit: minute
              requests_per_unit: 60
`

// Source: envoyproxy/ratelimit test/config/shadowmode_config.yaml.
const shadowModeConfig = `# Basic configuration for testing.
domain: test-domain
descriptors:
  # Top level key/value with no default rate limit.
  - key: key1
    value: value1
    descriptors:
      # 2nd level key only with default rate limit.
      - key: subkey1
        rate_limit:
          unit: second
          requests_per_unit: 5

      # 2nd level key/value with limit. Specific override at 2nd level.
      - key: subkey1
        value: subvalue1
        rate_limit:
          unit: second
          requests_per_unit: 10
        shadow_mode: true

  # Top level key only with default rate limit.
  - key: key2
    rate_limit:
      unit: minute
      requests_per_unit: 20
    shadow_mode: true
  # Top level key/value with limit. Specific override at 1st level.
  - key: key2
    value: value2
    rate_limit:
      unit: minute
      requests_per_unit: 30
`

// Source: envoyproxy/ratelimit test/config/wildcard.yaml, adapted: without
// midWild and multiWild, whose '*' inside a value Allot refuses.
const wildcard = `# Basic configuration for testing.
domain: test-domain
descriptors:
  - key: wild
    value: foo*
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: noWild
    value: foo
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: noVal
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: nestedWild
    value: val1
    descriptors:
      - key: wild
        value: goo*
        rate_limit:
          unit: minute
          requests_per_unit: 20
`

// Source: envoyproxy/ratelimit examples/ratelimit/config/example.yaml,
// adapted: without bar=banned (requests_per_unit 0) and the quota_mode
// services (quota_mode, metadata).
const exampleRL = `---
domain: rl
descriptors:
  - key: category
    value: account
    rate_limit:
      replaces:
        - name: bkthomps
        - name: fake_name
      unit: minute
      requests_per_unit: 4
  - key: source_cluster
    value: proxy
    descriptors:
      - key: destination_cluster
        value: bkthomps
        rate_limit:
          replaces:
            - name: bkthomps
          unit: minute
          requests_per_unit: 2
      - key: destination_cluster
        value: mock
        rate_limit:
          unit: minute
          requests_per_unit: 1
      - key: destination_cluster
        value: override
        rate_limit:
          replaces:
            - name: banned_limit
          unit: minute
          requests_per_unit: 2
      - key: destination_cluster
        value: fake
        rate_limit:
          name: fake_name
          unit: minute
          requests_per_unit: 2
  - key: foo
    rate_limit:
      unit: minute
      requests_per_unit: 2
    descriptors:
      - key: bar
        rate_limit:
          unit: minute
          requests_per_unit: 3
      - key: bar
        value: bkthomps
        rate_limit:
          name: bkthomps
          unit: minute
          requests_per_unit: 1
      - key: baz
        rate_limit:
          unit: second
          requests_per_unit: 1
      - key: baz
        value: not-so-shady
        rate_limit:
          unit: minute
          requests_per_unit: 3
      - key: baz
        value: shady
        rate_limit:
          unit: minute
          requests_per_unit: 3
        shadow_mode: true
      - key: bay
        rate_limit:
          unlimited: true
  - key: unspec
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 2
  - key: qux
    rate_limit:
      unlimited: true
`

// Source: envoyproxy/ratelimit
// test/integration/runtime/current/ratelimit/config/another.yaml.
const another = `domain: another
descriptors:
  - key: key2
    rate_limit:
      unit: minute
      requests_per_unit: 20

  - key: key3
    rate_limit:
      unit: hour
      requests_per_unit: 10

  - key: key2_local
    rate_limit:
      unit: minute
      requests_per_unit: 20

  - key: key3_local
    rate_limit:
      unit: hour
      requests_per_unit: 10

  - key: key4
    rate_limit:
      unit: day
      requests_per_unit: 20

  - key: key4_local
    rate_limit:
      unit: day
      requests_per_unit: 20
`

// The units ratelimit added after the README's four (api/ratelimit/config/
// ratelimit/v3/rls_conf.proto: WEEK, MONTH, YEAR), and the case ratelimit
// ignores (it upper-cases the unit).
const longUnits = `domain: long
descriptors:
  - key: per_second
    rate_limit: {unit: SECOND, requests_per_unit: 1}
  - key: per_week
    rate_limit: {unit: week, requests_per_unit: 7}
  - key: per_month
    rate_limit: {unit: Month, requests_per_unit: 30}
  - key: per_year
    rate_limit: {unit: year, requests_per_unit: 4294967295}
`

// ordered is about ratelimit trying wildcards in file order: a wildcard
// that an earlier, shorter one always matches first is never used.
const ordered = `domain: ordered
descriptors:
  - key: path
    value: /api/v1/*
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    value: /api/*
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: path
    value: /api/v1/users*
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: path
    value: /api/v1/users
    rate_limit: {unit: second, requests_per_unit: 4}
`

// shadowing has descriptors without a rate_limit that ratelimit stops at,
// where a more general sibling would otherwise apply.
const shadowing = `domain: shadowing
descriptors:
  - key: tenant
    value: internal
    descriptors:
      - key: path
        value: /health
  - key: tenant
    value: beta*
  - key: tenant
    value: beta-partner
  - key: tenant
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 100}
  - key: route
    value: /admin*
  - key: route
    value: /
    rate_limit: {unit: second, requests_per_unit: 50}
`

// sharedNames reuses a rate_limit name, as ratelimit allows: a replaces
// entry then drops every limit of the name.
const sharedNames = `domain: shared
descriptors:
  - key: user
    value: alice
    rate_limit: {name: vip, unit: second, requests_per_unit: 100}
  - key: user
    value: bob
    rate_limit: {name: vip, unit: second, requests_per_unit: 200}
  - key: plan
    value: enterprise
    rate_limit:
      unit: second
      requests_per_unit: 1000
      replaces: [{name: vip}, {name: nobody}]
  - key: team
    rate_limit: {name: "team limit", unit: minute, requests_per_unit: 10}
  - key: user
    value: carol
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: carol
    rate_limit: {name: shared.user_carol, unit: minute, requests_per_unit: 2}
`

// anchors uses YAML anchors, aliases and merge keys, which ratelimit's
// YAML reader expands.
const anchors = `domain: anchors
descriptors:
  - key: a
    rate_limit: &minute10 {unit: minute, requests_per_unit: 10}
  - key: b
    rate_limit:
      <<: *minute10
      requests_per_unit: 20
  - &c
    key: c
    value: "1"
    rate_limit: *minute10
  - <<: *c
    value: 2
`
