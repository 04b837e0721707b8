package lease

import (
	"errors"
	"fmt"
)

// ErrInvalid is wrapped by every validation error of this package.
var ErrInvalid = errors.New("lease: invalid")

// Intent is why a limit exists, which decides how wrong it may be, in which
// direction, and what it does when the coordinator cannot be reached.
type Intent uint8

const (
	// Capacity protects the system. It may overshoot by a small tolerance
	// (the number was an estimate anyway) and, cut off from the
	// coordinator, falls back to a conservative local share: the limit
	// divided by the nodes last seen.
	Capacity Intent = iota + 1
	// Quota enforces a billed plan. It must never refuse a customer while
	// the fleet's admitted total is under the limit; overshooting by its
	// tolerance is the price. Cut off, it fails open: each node keeps
	// serving on its last lease (and keys it held none for, on their
	// unleased share).
	Quota
	// Abuse stops hostile traffic. It is strict, never meaningfully
	// overshoots, may react slowly, and fails closed.
	Abuse
)

var intentNames = [...]string{Capacity: "capacity", Quota: "quota", Abuse: "abuse"}

func (i Intent) valid() bool { return i >= Capacity && i <= Abuse }

func (i Intent) String() string {
	if i.valid() {
		return intentNames[i]
	}
	return fmt.Sprintf("intent(%d)", uint8(i))
}

// ParseIntent returns the intent a rule file names.
func ParseIntent(s string) (Intent, error) {
	for i := Capacity; i <= Abuse; i++ {
		if intentNames[i] == s {
			return i, nil
		}
	}
	return 0, fmt.Errorf("%w intent %q (want capacity, quota or abuse)", ErrInvalid, s)
}

// MarshalText implements encoding.TextMarshaler.
func (i Intent) MarshalText() ([]byte, error) {
	if !i.valid() {
		return nil, fmt.Errorf("%w intent %d", ErrInvalid, uint8(i))
	}
	return []byte(intentNames[i]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (i *Intent) UnmarshalText(b []byte) error {
	v, err := ParseIntent(string(b))
	if err != nil {
		return err
	}
	*i = v
	return nil
}

// DefaultTolerance is how far above the limit the fleet may go, as a
// fraction of the limit: 3% for capacity, 5% for quota, none for abuse.
func (i Intent) DefaultTolerance() float64 {
	switch i {
	case Capacity:
		return 0.03
	case Quota:
		return 0.05
	}
	return 0
}

// DefaultFailMode is what a node does with the intent's limits when no
// coordinator answers and its lease has expired.
func (i Intent) DefaultFailMode() FailMode {
	switch i {
	case Quota:
		return FailOpen
	case Abuse:
		return FailClosed
	}
	return FailFallback
}

// FailMode is what a node enforces for a rule once its lease has expired
// and no coordinator answers.
type FailMode uint8

const (
	// FailFallback enforces a conservative local share: the limit divided
	// by the number of nodes last seen.
	FailFallback FailMode = iota + 1
	// FailOpen keeps enforcing the last lease, however old; a node that
	// never had one admits up to the whole limit.
	FailOpen
	// FailClosed refuses everything the rule covers.
	FailClosed
)

var failModeNames = [...]string{FailFallback: "fallback", FailOpen: "open", FailClosed: "closed"}

func (m FailMode) valid() bool { return m >= FailFallback && m <= FailClosed }

func (m FailMode) String() string {
	if m.valid() {
		return failModeNames[m]
	}
	return fmt.Sprintf("failmode(%d)", uint8(m))
}

// ParseFailMode returns the fail mode a rule file names.
func ParseFailMode(s string) (FailMode, error) {
	for m := FailFallback; m <= FailClosed; m++ {
		if failModeNames[m] == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("%w fail mode %q (want fallback, open or closed)", ErrInvalid, s)
}

// MarshalText implements encoding.TextMarshaler.
func (m FailMode) MarshalText() ([]byte, error) {
	if !m.valid() {
		return nil, fmt.Errorf("%w fail mode %d", ErrInvalid, uint8(m))
	}
	return []byte(failModeNames[m]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (m *FailMode) UnmarshalText(b []byte) error {
	v, err := ParseFailMode(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// FallbackShare is the allowance a node enforces, in the limit's units,
// when its lease has expired and no coordinator answers: the mode's rule
// applied to the rule's limit, the last lease the node held (negative if
// it never held one) and the number of nodes it last heard of. Open keeps
// the last lease; a key that never had one keeps its unleased share rather
// than the whole limit, which every node at once could otherwise spend.
func FallbackShare(mode FailMode, limit, lastGrant float64, nodes int) float64 {
	switch mode {
	case FailOpen:
		if lastGrant >= 0 {
			return lastGrant
		}
		return UnleasedShare(limit, nodes)
	case FailClosed:
		return 0
	}
	return UnleasedShare(limit, nodes)
}

// UnleasedShare is the allowance a node enforces for a key it holds no lease
// for, while it asks for one: an even share of the limit among the nodes it
// last heard of.
func UnleasedShare(limit float64, nodes int) float64 {
	return limit / float64(max(nodes, 1))
}
