package auth

import (
	"fmt"
	"io/fs"
	"os"
)

// SecretExposure says who, besides the file's owner and this process's
// own groups, may read the secret file at path (a private key, a token, a
// DSN with a password), from its permission bits, as ssh checks a private
// key: "every user" when others may read it, "group NAME" when its group
// may and that group is none of this process's (a service's own group,
// root:allot 0640 or Kubernetes's fsGroup, is its own), "" when no one
// else may. mode is the file's permission bits. Where files have no Unix
// owner and group, only the bits for others count.
func SecretExposure(path string) (mode fs.FileMode, who string, err error) {
	info, err := os.Stat(path)
	if err != nil {
		return 0, "", fmt.Errorf("auth: checking secret file %s: %w", path, err)
	}
	mode = info.Mode().Perm()
	switch {
	case mode&0o004 != 0:
		return mode, "every user", nil
	case mode&0o040 != 0:
		if g, ours := fileGroup(info); !ours {
			return mode, "group " + g, nil
		}
	}
	return mode, "", nil
}
