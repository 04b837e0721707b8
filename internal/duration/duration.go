// Package duration reads durations as Allot's flags and files write them,
// Go's time.ParseDuration syntax, and says how to fix the ones people
// write for other tools: days and weeks (1d, 1w), which Go has no unit
// for, and numbers without a unit.
package duration

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// ErrInvalid is wrapped by every error Parse returns.
var ErrInvalid = errors.New("not a duration")

// Error is a value Parse refused, and how to write it.
type Error struct {
	Value string
	Hint  string
}

func (e *Error) Error() string { return strconv.Quote(e.Value) + ": " + e.Hint }

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *Error) Unwrap() error { return ErrInvalid }

// days matches the day and week parts of a value such as 1d or 2w3d12h.
var days = regexp.MustCompile(`(\d+(?:\.\d+)?)([dw])`)

// Parse is time.ParseDuration, with an *Error saying what to write
// instead when it refuses s.
func Parse(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err == nil {
		return d, nil
	}
	return 0, Explain(s)
}

// Explain is the *Error for a value time.ParseDuration refuses.
func Explain(s string) error {
	if f, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err == nil && f != 0 {
		n := strings.TrimSpace(s)
		return &Error{Value: s, Hint: fmt.Sprintf("a duration needs a unit: %ss, %sm or %sh", n, n, n)}
	}
	if m := days.FindStringSubmatch(s); m != nil {
		unit := m[2]
		converted := days.ReplaceAllStringFunc(s, func(part string) string {
			p := days.FindStringSubmatch(part)
			n, _ := strconv.ParseFloat(p[1], 64)
			if p[2] == "w" {
				n *= 7
			}
			return strconv.FormatFloat(n*24, 'f', -1, 64) + "h"
		})
		if d, err := time.ParseDuration(converted); err == nil {
			return &Error{Value: s, Hint: fmt.Sprintf("Go durations have no %s; use %s", unit, Format(d))}
		}
	}
	return &Error{Value: s, Hint: "not a duration: write a number and a unit (ns, us, ms, s, m or h), such as 500ms, 90s, 1m or 24h"}
}

// Format writes a duration as a person would: 1m, 1h30m, 24h, 500ms, not
// 1m0s or 24h0m0s.
func Format(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
