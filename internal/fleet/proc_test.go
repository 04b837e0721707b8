package fleet

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestProcExits runs real processes and checks what counts as an
// unexpected exit: one that nothing stopped calls Exited and is reported
// by UnexpectedExit; one ended by Kill or Terminate is neither.
func TestProcExits(t *testing.T) {
	for _, tc := range []struct {
		name       string
		script     string
		stop       func(p *Proc) error
		unexpected bool
		status     int // the exit status Exited sees, when unexpected
	}{
		{name: "exits by itself", script: "exit 3", unexpected: true, status: 3},
		{name: "exits 0 by itself", script: "exit 0", unexpected: true},
		{name: "killed", script: "exec sleep 60", stop: func(p *Proc) error { return p.Kill() }},
		{name: "terminated", script: "exec sleep 60", stop: func(p *Proc) error {
			err := p.Terminate(10 * time.Second)
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				return nil // killed by the SIGTERM: what was asked
			}
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "p.log")
			exited := make(chan error, 1)
			p := &Proc{Name: "p", Bin: "/bin/sh", Args: []string{"-c", tc.script}, LogPath: log,
				Exited: func(_ *Proc, err error) { exited <- err }}
			if err := p.UnexpectedExit(); err != nil {
				t.Errorf("before Start: UnexpectedExit %v", err)
			}
			if err := p.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Kill() })
			if p.PID() <= 0 {
				t.Errorf("PID %d while it runs", p.PID())
			}
			if tc.stop != nil {
				if err := tc.stop(p); err != nil {
					t.Fatalf("stopping: %v", err)
				}
			}
			if done, _ := p.Wait(30 * time.Second); !done {
				t.Fatal("still running after 30s")
			}
			// Exited runs just after the exit is recorded; for a stopped
			// process its absence is checked for a moment only (the flag
			// it depends on is UnexpectedExit's, checked below).
			select {
			case err := <-exited:
				if !tc.unexpected {
					t.Fatalf("Exited called (%v) for a process that was stopped", err)
				}
				var ee *exec.ExitError
				if code := 0; errors.As(err, &ee) {
					code = ee.ExitCode()
					if code != tc.status {
						t.Errorf("Exited saw status %d, want %d", code, tc.status)
					}
				} else if err != nil || tc.status != 0 {
					t.Errorf("Exited saw %v, want status %d", err, tc.status)
				}
			case <-time.After(map[bool]time.Duration{true: 30 * time.Second, false: 200 * time.Millisecond}[tc.unexpected]):
				if tc.unexpected {
					t.Fatal("Exited not called within 30s of the exit")
				}
			}
			err := p.UnexpectedExit()
			if tc.unexpected != (err != nil) {
				t.Fatalf("UnexpectedExit: %v, want an error: %v", err, tc.unexpected)
			}
			if err != nil && !strings.Contains(err.Error(), log) {
				t.Errorf("UnexpectedExit %q does not name the log %s", err, log)
			}
			// Started again, it is running, not exited, and a Kill is no
			// unexpected exit.
			p.Args = []string{"-c", "exec sleep 60"}
			if err := p.Start(); err != nil {
				t.Fatal(err)
			}
			if err := p.UnexpectedExit(); err != nil {
				t.Errorf("running again: UnexpectedExit %v", err)
			}
			if err := p.Kill(); err != nil {
				t.Fatal(err)
			}
			if err := p.UnexpectedExit(); err != nil {
				t.Errorf("after a restart and a Kill: UnexpectedExit %v", err)
			}
		})
	}
}
