package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/allot-io/allot/internal/fleet"
)

// demoExecutable is the binary the demo runs its coordinators from: this
// one, whose `coordinator` subcommand is a cluster member. Tests, whose
// own executable is the test binary, point it at a built allot.
var demoExecutable = os.Executable

// demoNodePrefix starts every gateway's node ID: the agent token is
// bound to demoNodePrefix+"*", so the gateways may report as themselves
// and as nothing else.
const demoNodePrefix = "gw-"

// demoAgentToken names the gateways' agent token, one for all of them.
const demoAgentToken = "demo-gateways"

// newDemoCluster lays out the demo's coordinator cluster with package
// fleet: three `allot coordinator` processes run from this binary,
// children of this one, on loopback ports, with their data directories
// and logs in dir. It runs the way a deployment should, with security on,
// so that what the demo shows is the secure path and not a shortcut
// around it: a throwaway CA in dir signs each member's certificate
// (mutual TLS between members), the gateways report with an agent token
// bound to their node IDs, and the demo's own calls use TLS and the admin
// token. exited is called when a member exits that nothing stopped.
// Nothing runs until Start.
func newDemoCluster(dir string, exited func(co *fleet.Coordinator, err error)) (*fleet.Cluster, error) {
	bin, err := demoExecutable()
	if err != nil {
		return nil, fmt.Errorf("finding this binary to run the coordinators: %w", err)
	}
	cl, err := fleet.New(fleet.Options{Bin: bin, Dir: dir, Secure: true,
		AgentTokens:     map[string]string{demoAgentToken: demoNodePrefix + "*"},
		CoordinatorArgs: []string{"--region", "demo"},
		// Polled every 50 ms, the election is timed to within that.
		PollInterval:      50 * time.Millisecond,
		CoordinatorExited: exited})
	if err != nil {
		return nil, fmt.Errorf("laying out the coordinators: %w", err)
	}
	return cl, nil
}

// demoOperator is the demo's own credentials as an operator command's,
// calling the member at addr: TLS verified against the CA, and the admin
// token.
func demoOperator(creds *fleet.Creds, addr string) *clientFlags {
	return &clientFlags{coordinators: addr, timeout: 10 * time.Second, creds: credFlags{ca: creds.CA, tokenFile: creds.Admin}}
}

// describeSecurity is the line telling the user how the demo is secured
// and where the credentials are, to try `allot status --ca …
// --token-file …` against the running cluster.
func describeSecurity(creds *fleet.Creds) string {
	return fmt.Sprintf("secured: mutual TLS between members, TLS + bearer tokens for agents and the operator (throwaway CA, certificates and tokens in %s)", creds.Dir)
}

// describeCoordinators lists the members as "c1 pid 123 grpc
// 127.0.0.1:12345, …".
func describeCoordinators(cl *fleet.Cluster) string {
	var parts []string
	for _, co := range cl.Coords {
		parts = append(parts, fmt.Sprintf("%s pid %d grpc %s", co.ID, co.PID(), co.GRPC))
	}
	return strings.Join(parts, ", ")
}

// tailCoordinatorLogs writes the end of each member's log.
func tailCoordinatorLogs(w io.Writer, cl *fleet.Cluster) {
	for _, co := range cl.Coords {
		tailFile(w, co.ID+" (allot "+strings.Join(co.Args, " ")+")", co.LogPath, 20)
	}
}

// tailFile writes the last n lines of the file at path, under a heading.
func tailFile(w io.Writer, name, path string, n int) {
	data, err := os.ReadFile(path)
	if err != nil || len(data) == 0 {
		return
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	fmt.Fprintf(w, "last lines of the log of %s:\n", name)
	for _, l := range lines[max(0, len(lines)-n):] {
		fmt.Fprintln(w, "  "+l)
	}
}
