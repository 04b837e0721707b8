package main

import (
	"fmt"

	"github.com/allot-io/allot/internal/auth"
	"google.golang.org/grpc"
)

// demoNodePrefix starts every gateway's node ID: the agent token is
// bound to demoNodePrefix+"*", so the gateways may report as themselves
// and as nothing else.
const demoNodePrefix = "gw-"

// demoCreds are the demo's throwaway credentials, files in its directory:
// the demo runs the way a deployment should, with security on, so that
// what it shows is the secure path and not a shortcut around it.
type demoCreds struct {
	dir string
	// caFile is the CA certificate everything is verified against.
	caFile string
	// members are each coordinator's certificate and key, by member ID:
	// the member role, for the Raft transport's mutual TLS and for
	// joining.
	members map[string]auth.Issued
	// tokensFile is the coordinators' --auth-tokens: the admin token
	// and the gateways' agent token, as SHA-256 hashes.
	tokensFile string
	// adminTokenFile holds the admin token: the demo's own calls (rules,
	// status, usage) and a member's when it joins.
	adminTokenFile string
	// agentTokenFile holds the gateways' token, bound to their node IDs.
	agentTokenFile string
}

// demoSecurity makes a CA in dir, a member certificate for each of
// members (for 127.0.0.1 and localhost, the addresses the demo dials),
// an admin token and an agent token for the node IDs matching agentNodes,
// and writes the coordinators' tokens file and the clients' token files.
func demoSecurity(dir string, members []string, agentNodes string) (*demoCreds, error) {
	ca, err := auth.NewCA(dir, "demo-ca", "allot.demo")
	if err != nil {
		return nil, fmt.Errorf("making the demo's CA: %w", err)
	}
	c := &demoCreds{dir: dir, caFile: ca.File, members: map[string]auth.Issued{}}
	for _, id := range members {
		if c.members[id], err = ca.IssueMember(id); err != nil {
			return nil, fmt.Errorf("issuing %s's member certificate: %w", id, err)
		}
	}
	tokens, files, err := auth.IssueTokens(dir,
		auth.TokenSpec{Name: "demo-operator", Role: auth.Admin},
		auth.TokenSpec{Name: "demo-gateways", Role: auth.Agent, Nodes: agentNodes})
	if err != nil {
		return nil, fmt.Errorf("the demo's tokens: %w", err)
	}
	c.tokensFile, c.adminTokenFile, c.agentTokenFile = tokens, files["demo-operator"], files["demo-gateways"]
	return c, nil
}

// memberArgs are the credential flags of member id's `allot coordinator`:
// its certificate and the CA (mutual TLS on Raft, TLS on gRPC), the
// tokens it accepts, and the admin token it presents when it joins.
func (c *demoCreds) memberArgs(id string) ([]string, error) {
	issued, ok := c.members[id]
	if !ok {
		return nil, fmt.Errorf("no certificate was issued for member %s", id)
	}
	return []string{"--cert", issued.CertFile, "--key", issued.KeyFile, "--ca", c.caFile,
		"--auth-tokens", c.tokensFile, "--token-file", c.adminTokenFile}, nil
}

// operator is the demo's own credentials as an operator command's: TLS
// verified against the CA, and the admin token.
func (c *demoCreds) operator() credFlags {
	return credFlags{ca: c.caFile, tokenFile: c.adminTokenFile}
}

// dialOptions dial a member with the operator's credentials.
func (c *demoCreds) dialOptions() ([]grpc.DialOption, error) {
	cf := c.operator()
	opts, err := cf.dialOptions(nil)
	if err != nil {
		return nil, fmt.Errorf("the demo's operator credentials: %w", err)
	}
	return opts, nil
}

// describe is the line telling the user how the demo is secured and
// where the credentials are, to try `allot status --ca … --token-file …`
// against the running cluster.
func (c *demoCreds) describe() string {
	return fmt.Sprintf("secured: mutual TLS between members, TLS + bearer tokens for agents and the operator (throwaway CA, certificates and tokens in %s)", c.dir)
}
