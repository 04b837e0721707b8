package fleet

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"
)

// LogError is one line a process logged at ERROR.
type LogError struct {
	Log  string // the log's path
	Line string
}

func (e LogError) String() string { return e.Log + ": " + e.Line }

// Expected is an ERROR line a scenario explains: a member it killed
// refusing connections, a database it stopped. Pattern is matched against
// the whole line; Why says which event of the scenario causes it. From
// and To, when set, bound when the line may be logged (its hclog
// timestamp): a peer's connection reset is expected when the scenario
// killed a peer, not at any time.
type Expected struct {
	Pattern  *regexp.Regexp
	Why      string
	From, To time.Time
}

// explains reports whether e explains line, logged at at (zero when the
// line has no timestamp).
func (e Expected) explains(line string, at time.Time) bool {
	if !e.From.IsZero() && (at.IsZero() || at.Before(e.From)) {
		return false
	}
	if !e.To.IsZero() && (at.IsZero() || at.After(e.To)) {
		return false
	}
	return e.Pattern.MatchString(line)
}

// UnexpectedErrors returns every line the logs at paths hold at ERROR
// level (hclog's "[ERROR]", or a JSON line's "@level":"error") that no
// expected explains. A log that does not exist holds none. A healthy run
// logs no ERROR its scenario does not cause: one that does (a lease the
// algorithm refused, in a demo on a healthy cluster) is a defect the
// run's own checks need not otherwise see.
func UnexpectedErrors(paths []string, expected []Expected) ([]LogError, error) {
	var out []LogError
	for _, path := range paths {
		f, err := os.Open(path)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			line := sc.Text()
			if !isError(line) || explained(line, expected) {
				continue
			}
			out = append(out, LogError{path, line})
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
	}
	return out, nil
}

func isError(line string) bool {
	return strings.Contains(line, "[ERROR]") || strings.Contains(line, `"@level":"error"`)
}

func explained(line string, expected []Expected) bool {
	var at time.Time
	if ts, _, ok := strings.Cut(line, " "); ok {
		at, _ = time.Parse(time.RFC3339Nano, ts)
	}
	for _, e := range expected {
		if e.explains(line, at) {
			return true
		}
	}
	return false
}

// LogPaths is every log the cluster's processes write.
func (c *Cluster) LogPaths() []string {
	var out []string
	for _, co := range c.Coords {
		out = append(out, co.LogPath)
	}
	for _, s := range c.Sidecars {
		out = append(out, s.LogPath)
	}
	return out
}
