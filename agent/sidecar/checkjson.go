package sidecar

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/allot-io/allot/agent"
)

// The sidecar's POST /v1/check is on every gateway request's path, so its
// JSON is read and written by hand rather than through encoding/json's
// reflection. The contract stays encoding/json's, exactly:
//
//   - Decoding scans the common body (one object of the known keys, strings
//     without escapes, plain integer costs, null) and, for anything else it
//     cannot decide with certainty, hands the very same bytes to the
//     encoding/json decoder (decodeCheckJSON), which produces the result or
//     the error it always did.
//   - Encoding writes the bytes json.NewEncoder(w).Encode(resp) writes, down
//     to float formatting and string escaping.
//
// The differential tests and fuzz targets in checkjson_test.go hold both
// paths to that.

// bufPool holds the buffers a check is read into and answered from. A
// buffer grows to at most MaxCheckBody reading a body; one grown further
// by an outsized answer is dropped rather than kept.
var bufPool = sync.Pool{New: func() any {
	b := make([]byte, 0, 1024)
	return &b
}}

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

func putBuf(bp *[]byte) {
	if cap(*bp) > MaxCheckBody {
		return
	}
	*bp = (*bp)[:0]
	bufPool.Put(bp)
}

// readCheckBody reads all of r into buf, up to MaxCheckBody bytes. It
// never asks r for more than MaxCheckBody bytes in all, so a reader from
// http.MaxBytesReader with that limit does not trip on a body of exactly
// the limit.
//
// complete reports that r ended with io.EOF within the limit. Otherwise
// (a read error, or a body at least MaxCheckBody long) rest is what the
// JSON decoder must see after buf for the outcome to be the one it gives
// reading r directly: the same error again, or the unread rest of r. The
// decoder's result depends only on the bytes it reads and the error that
// ends them, not on how reads are split, so replaying is exact.
func readCheckBody(buf []byte, r io.Reader) (_ []byte, complete bool, rest io.Reader) {
	for {
		if len(buf) == MaxCheckBody {
			return buf, false, r
		}
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(max(2*cap(buf), 512), MaxCheckBody))
			copy(grown, buf)
			buf = grown
		}
		n, err := r.Read(buf[len(buf):min(cap(buf), MaxCheckBody)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, true, nil
		}
		if err != nil {
			return buf, false, errReader{err}
		}
	}
}

// errReader fails every read with err, as the readers of request bodies
// keep failing once they have failed.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// decodeCheckBuffered is DecodeCheck reading into the buffer *bp, which
// it may grow; the Request it returns shares no memory with it.
func decodeCheckBuffered(r io.Reader, bp *[]byte) (agent.Request, error) {
	body, complete, rest := readCheckBody((*bp)[:0], r)
	*bp = body
	if !complete {
		return decodeCheckJSON(io.MultiReader(bytes.NewReader(body), rest))
	}
	var s checkScan
	if !s.scan(body) {
		return decodeCheckJSON(bytes.NewReader(body))
	}
	c := s.request(body)
	return checkRequest(&c, s.cost, s.costSet)
}

// The fields of a CheckRequest the scanner knows, as indexes into
// checkScan.str. Cost, the only number, is kept apart.
const (
	fieldTenant = iota
	fieldPlan
	fieldUser
	fieldRoute
	fieldIP
	fieldPriority
	numStringFields
	fieldCost = numStringFields
)

// checkField maps an object key to its field, or -1 for any other key,
// including keys encoding/json would still match (case-insensitively or
// after unescaping): the scanner leaves those to it.
func checkField(key []byte) int {
	switch string(key) {
	case "tenant":
		return fieldTenant
	case "plan":
		return fieldPlan
	case "user":
		return fieldUser
	case "route":
		return fieldRoute
	case "ip":
		return fieldIP
	case "priority":
		return fieldPriority
	case "cost":
		return fieldCost
	}
	return -1
}

// checkScan is what the fast scanner found in a body: where each string
// field's value lies (the last one given, as encoding/json keeps the last
// of duplicate keys) and the cost, with whether it was given: an explicit
// 0 is a peek, an absent cost means 1.
type checkScan struct {
	str     [numStringFields]struct{ start, end int }
	cost    int64
	costSet bool
}

// scan reads body as a check request if it is in the subset of JSON the
// scanner decides exactly as encoding/json does: whitespace, one object
// and nothing after it; keys spelled exactly as the fields' tags; string
// values without escapes or control characters, in valid UTF-8 (so they
// are their own unquoted value); a cost written as an integer of at most
// 18 digits (so it cannot overflow); and null, which leaves a string
// field as it was and makes the cost absent again (encoding/json sets a
// pointer field to nil). It reports false for anything else, valid or not, leaving the
// verdict to encoding/json.
func (s *checkScan) scan(b []byte) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return skipSpace(b, i+1) == len(b)
	}
	for {
		// A key. Any key that is not exactly a field's name fails to
		// match, escapes included, so no escape needs decoding here.
		if i >= len(b) || b[i] != '"' {
			return false
		}
		end := bytes.IndexByte(b[i+1:], '"')
		if end < 0 {
			return false
		}
		f := checkField(b[i+1 : i+1+end])
		if f < 0 {
			return false
		}
		i = skipSpace(b, i+1+end+1)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipSpace(b, i+1)
		if i >= len(b) {
			return false
		}

		// Its value.
		switch {
		case b[i] == 'n':
			if !bytes.HasPrefix(b[i:], []byte("null")) {
				return false
			}
			i += len("null")
			if f == fieldCost {
				s.cost, s.costSet = 0, false
			}
		case f == fieldCost:
			v, n, ok := scanInt(b[i:])
			if !ok {
				return false
			}
			s.cost, s.costSet = v, true
			i += n
		case b[i] == '"':
			n, ok := scanPlainString(b[i+1:])
			if !ok {
				return false
			}
			s.str[f].start, s.str[f].end = i+1, i+1+n
			i += 1 + n + 1
		default:
			return false
		}

		// A comma and the next key, or the end of the object and of
		// the body.
		i = skipSpace(b, i)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return skipSpace(b, i+1) == len(b)
		default:
			return false
		}
	}
}

// skipSpace returns the index of the first byte of b from i on that is
// not JSON whitespace, or len(b).
func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// scanPlainString returns the length of the string contents at the start
// of b, up to its closing quote, if encoding/json would unquote it to
// those very bytes: no backslash, no control character, valid UTF-8
// (encoding/json replaces invalid bytes with U+FFFD).
func scanPlainString(b []byte) (int, bool) {
	ascii := true
	for i, c := range b {
		switch {
		case c == '"':
			if !ascii && !utf8.Valid(b[:i]) {
				return 0, false
			}
			return i, true
		case c == '\\' || c < ' ':
			return 0, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return 0, false
}

// scanInt reads the JSON number at the start of b if it is an integer
// (-?(0|[1-9][0-9]*), not followed by a fraction or an exponent) of at
// most 18 digits, which fits an int64: encoding/json gives it the value
// strconv.ParseInt does. It returns the value and the bytes it took.
func scanInt(b []byte) (v int64, n int, ok bool) {
	neg := n < len(b) && b[n] == '-'
	if neg {
		n++
	}
	start := n
	for n < len(b) && '0' <= b[n] && b[n] <= '9' {
		v = v*10 + int64(b[n]-'0')
		n++
	}
	digits := n - start
	if digits == 0 || digits > 18 || (digits > 1 && b[start] == '0') {
		return 0, 0, false
	}
	if n < len(b) && (b[n] == '.' || b[n] == 'e' || b[n] == 'E') {
		return 0, 0, false
	}
	if neg {
		v = -v
	}
	return v, n, true
}

// priorityNames are the priorities' names, the constants a scanned
// priority is turned into.
var priorityNames = [...]string{agent.Interactive.String(), agent.Batch.String(), agent.Critical.String(), agent.Exempt.String()}

// request builds the CheckRequest the scan found. The string fields are
// copied out of body into one string, so a whole request costs one
// allocation and keeps no reference to the (pooled) body. Its Cost is
// left nil: the caller passes s.cost to checkRequest by value, as a
// pointer to it would move s to the heap.
func (s *checkScan) request(body []byte) CheckRequest {
	var c CheckRequest
	// The priority is one of a few names, kept as the constant itself.
	p := s.str[fieldPriority]
	if pb := body[p.start:p.end]; len(pb) > 0 {
		for _, name := range priorityNames {
			if string(pb) == name {
				c.Priority = name
				break
			}
		}
		if c.Priority == "" {
			c.Priority = string(pb) // refused by ParsePriority
		}
	}
	var total int
	for _, v := range s.str[:fieldPriority] {
		total += v.end - v.start
	}
	if total == 0 {
		return c
	}
	var sb strings.Builder
	sb.Grow(total)
	for _, v := range s.str[:fieldPriority] {
		sb.Write(body[v.start:v.end])
	}
	all := sb.String()
	var fields [fieldPriority]string
	off := 0
	for f, v := range s.str[:fieldPriority] {
		n := v.end - v.start
		fields[f] = all[off : off+n]
		off += n
	}
	c.Tenant, c.Plan, c.User, c.Route, c.IP = fields[fieldTenant], fields[fieldPlan], fields[fieldUser], fields[fieldRoute], fields[fieldIP]
	return c
}

// errUnsupportedFloat is returned for a NaN or infinite float, which JSON
// cannot represent; encoding/json fails on them likewise.
var errUnsupportedFloat = errors.New("agent: check response: NaN or infinite float")

// appendCheckResponse appends r's JSON to b, the bytes
// json.NewEncoder(w).Encode(r) writes, newline included. On an error
// (a NaN or infinite float, which a Decision never holds) it returns b
// unchanged, as the encoder writes nothing then.
func appendCheckResponse(b []byte, r *CheckResponse) ([]byte, error) {
	for _, f := range [...]struct {
		name string
		v    float64
	}{{"period_seconds", r.PeriodSeconds}, {"reset_after_seconds", r.ResetAfterSeconds}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return b, fmt.Errorf("%w: %s is %v", errUnsupportedFloat, f.name, f.v)
		}
	}
	b = append(b, `{"allowed":`...)
	b = strconv.AppendBool(b, r.Allowed)
	if r.Rule != "" {
		b = append(b, `,"rule":`...)
		b = appendJSONString(b, r.Rule)
	}
	if r.Scope != "" {
		b = append(b, `,"scope":`...)
		b = appendJSONString(b, r.Scope)
	}
	b = append(b, `,"limit":`...)
	b = strconv.AppendInt(b, r.Limit, 10)
	b = append(b, `,"period_seconds":`...)
	b = appendJSONFloat(b, r.PeriodSeconds)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendInt(b, r.Remaining, 10)
	b = append(b, `,"retry_after_seconds":`...)
	if r.RetryAfterSeconds == nil {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, *r.RetryAfterSeconds, 10)
	}
	if r.Reason != "" {
		b = append(b, `,"reason":`...)
		b = appendJSONString(b, r.Reason)
	}
	b = append(b, `,"reset_after_seconds":`...)
	b = appendJSONFloat(b, r.ResetAfterSeconds)
	b = append(b, `,"fallback":`...)
	b = strconv.AppendBool(b, r.Fallback)
	if r.NoRules {
		b = append(b, `,"no_rules":true`...)
	}
	if r.Reservation != "" {
		b = append(b, `,"reservation":`...)
		b = appendJSONString(b, r.Reservation)
	}
	return append(b, "}\n"...), nil
}

// appendJSONFloat appends a finite float64 as encoding/json writes it: as
// ES6 converts a number to a string, with the shortest digits that read
// back the same, in exponent form below 1e-6 and from 1e21 on, and the
// exponent unpadded (e-7, not e-07).
func appendJSONFloat(b []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// appendJSONString appends s quoted as encoding/json quotes it with HTML
// escaping on (the Encoder's default): ", \ and the control characters
// escaped (\b \f \n \r \t by name, the others as \u00XX), <, > and & as
// \u003c, \u003e and \u0026, U+2028 and U+2029 escaped for JSONP, and
// each byte of invalid UTF-8 replaced by \ufffd.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= ' ' && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		var esc string
		switch {
		case r == utf8.RuneError && size == 1:
			esc = `\ufffd`
		case r == '\u2028':
			esc = `\u2028`
		case r == '\u2029':
			esc = `\u2029`
		}
		if esc != "" {
			b = append(b, s[start:i]...)
			b = append(b, esc...)
			start = i + size
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
