package ledgersink

import "strings"

// PostgreSQL's text holds no NUL byte, and the ledger's names may hold
// one (a protobuf string is any valid UTF-8, and a gateway passes tenants
// on as clients send them). A line that could not be stored would stop
// the export for good, so names are stored escaped: U+0000 as the two
// bytes 0x01 0x01 and U+0001 as 0x01 0x02, every other byte as it is.
// The escape keeps the bytewise order (each byte's code sorts as the
// byte does, and no code is a prefix of another), so rows still sort as
// the ledger does, and keeps text valid UTF-8. Only names holding those
// two control characters, which no real tenant has, look different in
// the table.

const escape = "\x01"

// StoredName is name as the table stores it: for a billing query that
// looks for such a name. LoadedName is the reverse.
func StoredName(name string) string { return storeName(name) }

// LoadedName is the name a stored one stands for.
func LoadedName(stored string) string { return loadName(stored) }

// storeName is name as the table stores it.
func storeName(name string) string {
	if !strings.ContainsAny(name, "\x00\x01") {
		return name
	}
	var b strings.Builder
	b.Grow(len(name) + 4)
	for i := 0; i < len(name); i++ {
		switch name[i] {
		case 0:
			b.WriteString("\x01\x01")
		case 1:
			b.WriteString("\x01\x02")
		default:
			b.WriteByte(name[i])
		}
	}
	return b.String()
}

// loadName is the name a stored one stands for.
func loadName(stored string) string {
	if !strings.Contains(stored, escape) {
		return stored
	}
	var b strings.Builder
	b.Grow(len(stored))
	for i := 0; i < len(stored); i++ {
		if stored[i] == 1 && i+1 < len(stored) {
			i++
			b.WriteByte(stored[i] - 1)
			continue
		}
		b.WriteByte(stored[i])
	}
	return b.String()
}
