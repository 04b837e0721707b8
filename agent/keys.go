package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"unicode/utf8"

	"github.com/allot-io/allot/lease/rules"
)

// maxAttrLen bounds each attribute in a key. A longer value (a hostile
// user name, a long route), or one that is not valid UTF-8, is replaced by
// a hash of it written in hex, so keys stay small while distinct values
// stay distinct, and every key is valid UTF-8: keys travel in protobuf
// strings, which gRPC refuses to send otherwise, and a report it cannot
// send would stop the node's reporting.
const maxAttrLen = 128

// maxPartLen bounds an attribute kept as is in a key of several: its
// length prefix is one byte below 0x7f, which marks a hashed attribute.
const maxPartLen = 126

// keyBuf holds one encoded key on the stack: at most four attributes, each
// at most maxAttrLen bytes plus a length prefix.
type keyBuf [4 * (maxAttrLen + 2)]byte

// attrValue returns a request's value for an attribute.
func (r *Request) attrValue(a rules.Attr) string {
	switch a {
	case rules.AttrTenant:
		return r.Tenant
	case rules.AttrUser:
		return r.User
	case rules.AttrRoute:
		return r.Route
	case rules.AttrIP:
		return r.IP
	}
	return ""
}

// encodeKey writes the key a rule's attributes give a request into buf. A
// single attribute is its value as is; several are each prefixed by their
// length, so that ("a\x00b", "c") and ("a", "b\x00c") stay apart. It runs
// when a key becomes hot, never per request.
func encodeKey(buf *keyBuf, attrs []rules.Attr, req *Request) []byte {
	if len(attrs) == 1 {
		v := req.attrValue(attrs[0])
		if len(v) <= maxAttrLen && utf8.ValidString(v) {
			return append(buf[:0], v...)
		}
		return appendLong(append(buf[:0], "\x00#"...), v)
	}
	b := buf[:0]
	for _, a := range attrs {
		v := req.attrValue(a)
		if len(v) > maxPartLen || !utf8.ValidString(v) {
			b = appendLong(append(b, 0x7f), v)
			continue
		}
		b = append(b, byte(len(v)))
		b = append(b, v...)
	}
	return b
}

// appendLong appends 128 bits of a value's SHA-256, in hex: the same on
// every node, so the coordinators see one key for one value fleet-wide.
func appendLong(b []byte, v string) []byte {
	sum := sha256.Sum256([]byte(v))
	return hex.AppendEncode(b, sum[:16])
}
