package pgserver

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// serverUser is the OS user initdb and postgres run as when this process
// is root, since both refuse to run as root.
const serverUser = "postgres"

// owner is who the server's processes run as: nil credentials mean this
// process's own user.
type owner struct {
	cred *syscall.Credential
}

// lookupOwner picks the user to run the server as: this process's own,
// or serverUser when it is root.
func lookupOwner() (owner, error) {
	if os.Geteuid() != 0 {
		return owner{}, nil
	}
	u, err := user.Lookup(serverUser)
	if err != nil {
		return owner{}, fmt.Errorf("pgserver: running as root, and initdb and postgres refuse root: need the %q OS user (it comes with apt-get install postgresql): %w", serverUser, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return owner{}, fmt.Errorf("pgserver: user %s has uid %q: %w", serverUser, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return owner{}, fmt.Errorf("pgserver: user %s has gid %q: %w", serverUser, u.Gid, err)
	}
	return owner{cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}}, nil
}

// sysProcAttr runs a child as the owner, in a process group of its own
// (so a terminal's Ctrl-C reaches the server only through Stop), and
// kills it should this process die without stopping it.
func (o owner) sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: o.cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// mkdir makes dir, owned by the server's user.
func (o owner) mkdir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	return o.chown(dir)
}

func (o owner) chown(path string) error {
	if o.cred == nil {
		return nil
	}
	if err := os.Chown(path, int(o.cred.Uid), int(o.cred.Gid)); err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	return nil
}

// reach lets the server's user traverse every directory above dir: a
// directory made by os.MkdirTemp (t.TempDir's too) is 0700 and owned by
// root, which the postgres user cannot enter. It adds only the search
// bit for others (o+x: enter, not list) and only on directories this
// process owns.
func (o owner) reach(dir string) error {
	if o.cred == nil {
		return nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	me := uint32(os.Geteuid())
	for d := abs; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("pgserver: %w", err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if ok && st.Uid == me && fi.Mode().Perm()&0o001 == 0 {
			keep := fi.Mode() & (os.ModePerm | os.ModeSticky | os.ModeSetuid | os.ModeSetgid)
			if err := os.Chmod(d, keep|0o001); err != nil {
				return fmt.Errorf("pgserver: letting %s reach %s: %w", serverUser, d, err)
			}
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}
