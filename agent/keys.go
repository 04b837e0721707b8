package agent

import (
	"github.com/allot-io/allot/rules"
)

// maxAttrLen bounds each attribute kept as is in a key of one: see
// rules.AppendKey.
const maxAttrLen = rules.MaxKeyAttrLen

// keyBuf holds one encoded key on the stack: at most four attributes, each
// at most maxAttrLen bytes plus a length prefix. A descriptor key is at
// most rules.MaxDescriptorKeyLen, and a call limit's suffix short: both fit.
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

// encodeKey writes the key a rule's attributes give a request into buf,
// as rules.AppendKey (or, for a descriptor rule, AppendDescriptorKey)
// writes it. It runs when a key becomes hot, never per request.
func encodeKey(buf *keyBuf, attrs []rules.Attr, req *Request) []byte {
	if attrs[0] == rules.AttrDescriptor {
		var vals [rules.MaxDescriptorEntries]string
		n := 0
		for _, e := range req.desc.Entries {
			if n == len(vals) {
				break
			}
			vals[n] = e.Value
			n++
		}
		b := rules.AppendDescriptorKey(buf[:0], vals[:n]...)
		if req.lst != nil {
			b = append(b, req.lst.suffix...) // a call limit's key: calllimit.go
		}
		return b
	}
	var vals [4]string
	for i, a := range attrs {
		vals[i] = req.attrValue(a)
	}
	return rules.AppendKey(buf[:0], vals[:len(attrs)]...)
}
