package ledgersink

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestReadMigrations(t *testing.T) {
	sql := &fstest.MapFile{Data: []byte("SELECT 1;")}
	tests := []struct {
		name    string
		files   fstest.MapFS
		want    int
		wantErr string
	}{
		{"in order", fstest.MapFS{"m/0001_a.sql": sql, "m/0002_b.sql": sql, "m/README": sql}, 2, ""},
		{"a gap", fstest.MapFS{"m/0001_a.sql": sql, "m/0003_c.sql": sql}, 0, "want 2"},
		{"a repeat", fstest.MapFS{"m/0001_a.sql": sql, "m/0001_b.sql": sql}, 0, "want 2"},
		{"not from 1", fstest.MapFS{"m/0002_b.sql": sql}, 0, "want 1"},
		{"badly named", fstest.MapFS{"m/1_a.sql": sql}, 0, "NNNN_name.sql"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ms, err := readMigrations(tt.files, "m")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || len(ms) != tt.want {
				t.Fatalf("%d migrations, %v; want %d", len(ms), err, tt.want)
			}
		})
	}
	// The embedded ones.
	ms, err := migrations()
	if err != nil || len(ms) == 0 {
		t.Fatalf("embedded migrations: %d, %v", len(ms), err)
	}
}
