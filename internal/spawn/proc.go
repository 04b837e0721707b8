package spawn

import (
	"os"
	"strings"
)

// Env is this process's environment without ALLOT_ variables, which would
// change what a child allot process does (an admin token, a config file):
// the parent sets every flag it means.
func Env() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ALLOT_") {
			out = append(out, kv)
		}
	}
	return out
}

// Closed reports whether a channel that is only ever closed is closed.
func Closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
