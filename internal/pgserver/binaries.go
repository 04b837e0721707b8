package pgserver

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// ErrNotInstalled is what Available wraps when PostgreSQL's server
// programs cannot be found.
var ErrNotInstalled = errors.New("PostgreSQL is not installed (initdb and postgres not found; apt-get install postgresql)")

// debianBinGlob is where Debian's postgresql-NN packages put the server
// programs, which are not on PATH there.
const debianBinGlob = "/usr/lib/postgresql/*/bin"

// Available reports whether PostgreSQL's initdb and postgres can be found:
// on PATH first, then in the newest /usr/lib/postgresql/*/bin. Its error
// wraps ErrNotInstalled and says to apt-get install postgresql.
func Available() error {
	_, err := binDir()
	return err
}

// Program is the path of one of PostgreSQL's programs (psql, pg_dump) of
// the installation Available finds: beside initdb and postgres, or else on
// PATH (Debian's wrappers in /usr/bin).
func Program(name string) (string, error) {
	dir, err := binDir()
	if err != nil {
		return "", err
	}
	if p := filepath.Join(dir, name); isExecutable(p) {
		return p, nil
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("pgserver: %s is neither beside postgres in %s nor on PATH: %w", name, dir, err)
	}
	return p, nil
}

// binDir returns the directory holding both initdb and postgres.
func binDir() (string, error) {
	if initdb, err := exec.LookPath("initdb"); err == nil {
		dir := filepath.Dir(initdb)
		if isExecutable(filepath.Join(dir, "postgres")) {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob(debianBinGlob) // the pattern is constant and valid
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, dir := range dirs {
		if isExecutable(filepath.Join(dir, "initdb")) && isExecutable(filepath.Join(dir, "postgres")) {
			return dir, nil
		}
	}
	return "", fmt.Errorf("pgserver: %w (looked on PATH and in %s)", ErrNotInstalled, debianBinGlob)
}

// versionOf is the major version in /usr/lib/postgresql/NN/bin, 0 when
// the directory is not named by a number.
func versionOf(dir string) float64 {
	v, err := strconv.ParseFloat(filepath.Base(filepath.Dir(dir)), 64)
	if err != nil {
		return 0
	}
	return v
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// trimOutput keeps the end of a program's output for an error message.
func trimOutput(out []byte) string {
	s := strings.TrimSpace(string(out))
	const max = 2000
	if len(s) > max {
		s = "…" + s[len(s)-max:]
	}
	return s
}
