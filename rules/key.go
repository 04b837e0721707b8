package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"
	"unicode/utf8"
)

// Keys name what a rule counts, fleet-wide: every agent, and every Envoy
// speaking RLQS to the coordinators, must write the same key for the same
// values, or one key would be divided as two.
const (
	// MaxKeyAttrLen bounds a value kept as is in a key of one value. A
	// longer value, or one that is not valid UTF-8, is replaced by a hash
	// of it in hex, so keys stay small while distinct values stay
	// distinct, and every key is valid UTF-8 (keys travel in protobuf
	// strings).
	MaxKeyAttrLen = 128
	// maxPartLen bounds a value kept as is in a key of several: its
	// length prefix is one byte below 0x7f, which marks a hashed value.
	maxPartLen = 126
	// MaxDescriptorKeyLen bounds a descriptor rule's key: a longer one is
	// replaced by a hash of it.
	MaxDescriptorKeyLen = 256
)

// AppendKey appends the key that values form. A single value is itself;
// several are each prefixed by their length, so that ("a\x00b", "c") and
// ("a", "b\x00c") stay apart.
func AppendKey(b []byte, values ...string) []byte {
	if len(values) == 1 {
		v := values[0]
		if len(v) <= MaxKeyAttrLen && utf8.ValidString(v) {
			return append(b, v...)
		}
		return appendHash(append(b, "\x00#"...), v)
	}
	for _, v := range values {
		if len(v) > maxPartLen || !utf8.ValidString(v) {
			b = appendHash(append(b, 0x7f), v)
			continue
		}
		b = append(b, byte(len(v)))
		b = append(b, v...)
	}
	return b
}

// AppendDescriptorKey appends a descriptor rule's key: AppendKey of the
// entries' values, hashed whole when longer than MaxDescriptorKeyLen.
func AppendDescriptorKey(b []byte, values ...string) []byte {
	start := len(b)
	b = AppendKey(b, values...)
	if len(b)-start > MaxDescriptorKeyLen {
		whole := string(b[start:])
		b = appendHash(append(b[:start], "\x00#"...), whole)
	}
	return b
}

// CallLimitKeySuffix is what a limit set by the call (an Envoy
// descriptor's, rules.Rule.WithLimit) appends to a descriptor rule's key,
// so that the key under that limit is a key of its own, divided apart
// from the same key under the rule's limit or another: a NUL, which no
// descriptor value from an HTTP header holds (RFC 9110 forbids it in
// field values), then the limit. Coordinators accept a key's own limit
// only on a key that ends so, so that a report cannot change the limit of
// a key other nodes share under the rule's.
//
// A call's own burst (burst above 0) is named too: "+burst" after the
// period.
func CallLimitKeySuffix(limit int64, period time.Duration, burst int64) string {
	s := "\x00limit:" + strconv.FormatInt(limit, 10) + "/" + period.String()
	if burst > 0 {
		s += "+" + strconv.FormatInt(burst, 10)
	}
	return s
}

// appendHash appends 128 bits of a value's SHA-256, in hex: the same on
// every node.
func appendHash(b []byte, v string) []byte {
	sum := sha256.Sum256([]byte(v))
	return hex.AppendEncode(b, sum[:16])
}
