package agent

import (
	"encoding/binary"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease/rules"
)

// maxAttrLen bounds each attribute in a key. A longer value (a hostile
// user name, a long route) is replaced by a 16-byte hash of it, so keys
// stay small while distinct values stay distinct.
const maxAttrLen = 128

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
// length, so that ("a\x00b", "c") and ("a", "b\x00c") stay apart.
func encodeKey(buf *keyBuf, attrs []rules.Attr, req *Request, h *algo.Hasher) []byte {
	if len(attrs) == 1 {
		v := req.attrValue(attrs[0])
		if len(v) <= maxAttrLen {
			return append(buf[:0], v...)
		}
		return appendLong(buf[:0], v, h)
	}
	b := buf[:0]
	for _, a := range attrs {
		v := req.attrValue(a)
		if len(v) > maxAttrLen {
			b = append(b, 0xff)
			b = appendLong(b, v, h)
			continue
		}
		b = append(b, byte(len(v)))
		b = append(b, v...)
	}
	return b
}

// appendLong appends a marker and a 128-bit hash of an over-long value.
func appendLong(b []byte, v string, h *algo.Hasher) []byte {
	x, y := h.String(v).Sum128()
	b = append(b, "\x00#"...)
	b = binary.LittleEndian.AppendUint64(b, x)
	b = binary.LittleEndian.AppendUint64(b, y)
	return b
}
