package main

import (
	"fmt"

	"github.com/allot-io/allot/internal/auth"
	"github.com/hashicorp/go-hclog"
)

// secretFile is a flag naming a file that holds a secret: a private key,
// a token, a DSN with a password.
type secretFile struct{ flag, path string }

// warnExposedSecrets logs a warning for each secret file other users may
// read, naming the flag, the file and its mode, as ssh does for a private
// key: the server still starts (the file may be on a volume it cannot
// change), but a password readable by every user of the host should not
// go unnoticed. A file that cannot be checked is left to the code that
// reads it, which says why.
func warnExposedSecrets(log hclog.Logger, files ...secretFile) {
	for _, f := range files {
		if f.path == "" {
			continue
		}
		mode, who, err := auth.SecretExposure(f.path)
		if err != nil || who == "" {
			continue
		}
		log.Warn("a secret file is readable by other users: make it the service user's alone (chmod 600, or 640 with the service's own group)",
			"flag", "--"+f.flag, "file", f.path, "mode", fmt.Sprintf("%04o", mode), "readable_by", who)
	}
}
