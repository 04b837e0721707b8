package auth

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestSecretExposure: a secret file that other users can read is told
// apart from one only its owner and the process's own group can, by the
// bits ssh checks on a private key.
func TestSecretExposure(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		mode fs.FileMode
		gid  int // chown to this group first, as root; 0: the process's
		want string
	}{
		{"owner only", 0o600, 0, ""},
		{"owner read-only", 0o400, 0, ""},
		{"the process's own group", 0o640, 0, ""},
		{"every user, as echo > file leaves it", 0o644, 0, "every user"},
		{"others but not the group", 0o604, 0, "every user"},
		{"another group", 0o640, 65533, "group 65533"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, tt.name)
			if err := os.WriteFile(path, []byte("postgres://allot:secret@db/billing\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, tt.mode); err != nil {
				t.Fatal(err)
			}
			if tt.gid != 0 {
				if os.Geteuid() != 0 {
					t.Skip("giving a file another group needs root")
				}
				if err := os.Chown(path, -1, tt.gid); err != nil {
					t.Fatal(err)
				}
			}
			mode, who, err := SecretExposure(path)
			if err != nil || mode != tt.mode || who != tt.want {
				t.Errorf("SecretExposure = %04o, %q, %v; want %04o, %q", mode, who, err, tt.mode, tt.want)
			}
		})
	}
	if _, _, err := SecretExposure(filepath.Join(dir, "missing")); err == nil {
		t.Error("SecretExposure of a missing file: no error")
	}
}
