// Package plural writes counts of things in English: "1 rule", "2 rules",
// "3 batches". The CLI's and the harnesses' lines are read by people, and
// "1 lines in memory" reads as a bug.
package plural

import (
	"fmt"
	"strings"
)

// Count is n and the noun, in the plural unless n is 1.
func Count[N ~int | ~int32 | ~int64 | ~uint | ~uint32 | ~uint64](n N, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprint(n) + " " + Of(noun)
}

// Of is an English noun's regular plural.
func Of(noun string) string {
	for _, end := range []string{"s", "x", "z", "ch", "sh"} {
		if strings.HasSuffix(noun, end) {
			return noun + "es"
		}
	}
	if n := len(noun); n > 1 && noun[n-1] == 'y' && !strings.ContainsRune("aeiou", rune(noun[n-2])) {
		return noun[:n-1] + "ies"
	}
	return noun + "s"
}
