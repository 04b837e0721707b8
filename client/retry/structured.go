package retry

import (
	"strconv"
	"unicode/utf8"
)

// This file parses the subset of Structured Field Values for HTTP (RFC 9651,
// which obsoletes RFC 8941) that the RateLimit field needs: a List whose
// members carry parameters. Every bare item type is recognised so that a
// valid field is never rejected, but only integer values are kept. As the
// RFC requires, a field that fails to parse is ignored as a whole.

// sfValue is a parsed bare item; only integers keep their value.
type sfValue struct {
	integer bool
	n       int64
}

// sfParser walks a field value; i is the next byte to read.
type sfParser struct {
	s string
	i int
}

// parseList parses s as a List and returns the parameters of each member
// (nil when a member has none). ok is false if s is not a valid List.
func parseList(s string) (members []map[string]sfValue, ok bool) {
	p := sfParser{s: s}
	p.skipSP()
	for !p.done() {
		params, ok := p.member()
		if !ok {
			return nil, false
		}
		members = append(members, params)
		p.skipOWS()
		if p.done() {
			return members, true
		}
		if p.next() != ',' {
			return nil, false
		}
		p.skipOWS()
		if p.done() { // a trailing comma
			return nil, false
		}
	}
	return members, true
}

// member parses an Item or an Inner List, with its parameters.
func (p *sfParser) member() (map[string]sfValue, bool) {
	if p.peek() != '(' {
		if _, ok := p.bareItem(); !ok {
			return nil, false
		}
		return p.params()
	}
	p.i++
	for {
		p.skipSP()
		if p.done() {
			return nil, false
		}
		if p.peek() == ')' {
			p.i++
			return p.params()
		}
		if _, ok := p.bareItem(); !ok {
			return nil, false
		}
		if _, ok := p.params(); !ok {
			return nil, false
		}
		if c := p.peek(); c != ' ' && c != ')' {
			return nil, false
		}
	}
}

// params parses zero or more ";key[=value]" parameters. A key without a
// value is Boolean true; a repeated key keeps its last value.
func (p *sfParser) params() (map[string]sfValue, bool) {
	var m map[string]sfValue
	for p.peek() == ';' {
		p.i++
		p.skipSP()
		key, ok := p.key()
		if !ok {
			return nil, false
		}
		var v sfValue // Boolean true
		if p.peek() == '=' {
			p.i++
			if v, ok = p.bareItem(); !ok {
				return nil, false
			}
		}
		if m == nil {
			m = make(map[string]sfValue)
		}
		m[key] = v
	}
	return m, true
}

// key parses a parameter key: lcalpha or "*", then lcalpha, DIGIT, "_",
// "-", "." or "*".
func (p *sfParser) key() (string, bool) {
	start := p.i
	if c := p.peek(); !isLower(c) && c != '*' {
		return "", false
	}
	for p.i++; !p.done(); p.i++ {
		c := p.s[p.i]
		if !isLower(c) && !isDigit(c) && c != '_' && c != '-' && c != '.' && c != '*' {
			break
		}
	}
	return p.s[start:p.i], true
}

// bareItem parses one bare item of any type.
func (p *sfParser) bareItem() (sfValue, bool) {
	switch c := p.peek(); {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		return sfValue{}, p.str()
	case c == '*' || isAlpha(c):
		return sfValue{}, p.token()
	case c == ':':
		return sfValue{}, p.bytes()
	case c == '?':
		p.i++
		c := p.next()
		return sfValue{}, c == '0' || c == '1'
	case c == '@':
		p.i++
		v, ok := p.number()
		return sfValue{}, ok && v.integer
	case c == '%':
		return sfValue{}, p.displayString()
	default:
		return sfValue{}, false
	}
}

// number parses an Integer (at most 15 digits) or a Decimal (at most 12
// integer and 3 fractional digits).
func (p *sfParser) number() (sfValue, bool) {
	start := p.i
	if p.peek() == '-' {
		p.i++
	}
	digits := p.i
	if !isDigit(p.peek()) {
		return sfValue{}, false
	}
	dot := -1
	for ; !p.done(); p.i++ {
		c := p.s[p.i]
		if c == '.' && dot < 0 {
			if p.i-digits > 12 {
				return sfValue{}, false
			}
			dot = p.i
			continue
		}
		if !isDigit(c) {
			break
		}
		if (dot < 0 && p.i-digits >= 15) || (dot >= 0 && p.i-digits >= 16) {
			return sfValue{}, false
		}
	}
	if dot >= 0 {
		frac := p.i - dot - 1
		return sfValue{}, frac >= 1 && frac <= 3
	}
	n, err := strconv.ParseInt(p.s[start:p.i], 10, 64)
	return sfValue{integer: true, n: n}, err == nil
}

// str parses a String: printable ASCII in double quotes, with \" and \\ as
// the only escapes.
func (p *sfParser) str() bool {
	p.i++
	for !p.done() {
		switch c := p.next(); {
		case c == '\\':
			if e := p.next(); e != '"' && e != '\\' {
				return false
			}
		case c == '"':
			return true
		case c < 0x20 || c > 0x7e:
			return false
		}
	}
	return false
}

// token parses a Token: ALPHA or "*", then tchar, ":" or "/".
func (p *sfParser) token() bool {
	for p.i++; !p.done() && (isTchar(p.s[p.i]) || p.s[p.i] == ':' || p.s[p.i] == '/'); p.i++ {
	}
	return true
}

// bytes parses a Byte Sequence: base64 between colons.
func (p *sfParser) bytes() bool {
	p.i++
	for !p.done() {
		c := p.next()
		if c == ':' {
			return true
		}
		if !isAlpha(c) && !isDigit(c) && c != '+' && c != '/' && c != '=' {
			return false
		}
	}
	return false
}

// displayString parses a Display String: %"..." with non-ASCII bytes
// percent-encoded in lowercase hex, decoding to valid UTF-8.
func (p *sfParser) displayString() bool {
	p.i++
	if p.next() != '"' {
		return false
	}
	var buf []byte
	for !p.done() {
		c := p.next()
		switch {
		case c == '%':
			hi, lo := unhex(p.next()), unhex(p.next())
			if hi < 0 || lo < 0 {
				return false
			}
			buf = append(buf, byte(hi<<4|lo))
		case c == '"':
			return utf8.Valid(buf)
		case c < 0x20 || c > 0x7e:
			return false
		default:
			buf = append(buf, c)
		}
	}
	return false
}

func (p *sfParser) done() bool { return p.i >= len(p.s) }

// peek returns the next byte without consuming it, or 0 at the end.
func (p *sfParser) peek() byte {
	if p.done() {
		return 0
	}
	return p.s[p.i]
}

// next consumes and returns the next byte, or 0 at the end.
func (p *sfParser) next() byte {
	c := p.peek()
	if !p.done() {
		p.i++
	}
	return c
}

func (p *sfParser) skipSP() {
	for p.peek() == ' ' {
		p.i++
	}
}

func (p *sfParser) skipOWS() {
	for c := p.peek(); c == ' ' || c == '\t'; c = p.peek() {
		p.i++
	}
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
func isLower(c byte) bool { return 'a' <= c && c <= 'z' }
func isAlpha(c byte) bool { return isLower(c) || ('A' <= c && c <= 'Z') }

// isTchar reports whether c may appear in an HTTP token (RFC 9110).
func isTchar(c byte) bool {
	if isAlpha(c) || isDigit(c) {
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

// unhex returns the value of a lowercase hex digit, or -1.
func unhex(c byte) int {
	switch {
	case isDigit(c):
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	}
	return -1
}
