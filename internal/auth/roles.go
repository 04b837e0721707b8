package auth

import (
	"fmt"
	"path"
	"slices"
	"strings"
)

// Role is what a caller may do.
type Role uint8

// Roles. Admin and Member may do everything. Balance reads one
// tenant's balance and nothing else: the credential a customer's
// dashboard holds.
const (
	Agent Role = 1 << iota
	Reader
	Admin
	Member
	Balance
)

// ParseRole reads a role's name: agent, reader, admin, balance, or member
// (also spelled coordinator).
func ParseRole(s string) (Role, error) {
	switch s {
	case "agent":
		return Agent, nil
	case "reader":
		return Reader, nil
	case "admin":
		return Admin, nil
	case "member", "coordinator":
		return Member, nil
	case "balance":
		return Balance, nil
	}
	return 0, fmt.Errorf("role %q: want agent, reader, balance or admin", s)
}

func (r Role) String() string {
	var names []string
	for _, n := range []struct {
		r    Role
		name string
	}{{Agent, "agent"}, {Reader, "reader"}, {Admin, "admin"}, {Member, "member"}, {Balance, "balance"}} {
		if r&n.r != 0 {
			names = append(names, n.name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, "|")
}

// Grant is one credential's permission: a role, for an agent the nodes
// and regions it may report as, and for a balance credential its tenant.
type Grant struct {
	// Role is the one role this grant holds.
	Role Role
	// Name identifies the credential in logs and metrics (a token's
	// name, a certificate's subject); never the secret.
	Name string
	// NodeGlob, when set, is a shell pattern (path.Match) a reporting
	// node's ID must match.
	NodeGlob string
	// NodeNames are exact node IDs the grant may report as.
	NodeNames []string
	// RegionGlob, when set, is a pattern the reported region must match;
	// empty allows any region.
	RegionGlob string
	// Tenant is, for the balance role, the one tenant whose balance the
	// grant may read.
	Tenant string
}

// Permits reports whether the grant may call a method open to roles.
func (g Grant) Permits(roles Role) bool {
	return g.Role&(Admin|Member) != 0 || g.Role&roles != 0
}

// MayReportAs reports whether the grant may report usage as node in
// region.
func (g Grant) MayReportAs(node, region string) bool {
	if g.Role&(Admin|Member) != 0 {
		return true
	}
	if g.Role != Agent {
		return false
	}
	if g.RegionGlob != "" {
		if ok, _ := path.Match(g.RegionGlob, region); !ok {
			return false
		}
	}
	if slices.Contains(g.NodeNames, node) {
		return true
	}
	ok, _ := path.Match(g.NodeGlob, node)
	return g.NodeGlob != "" && ok
}

// MayReadBalance reports whether the grant may read tenant's balance:
// a reader's grant (or an admin's, or a member's) any tenant's, a balance
// grant its own tenant's alone.
func (g Grant) MayReadBalance(tenant string) bool {
	if g.Permits(Reader) {
		return true
	}
	return g.Role == Balance && g.Tenant != "" && g.Tenant == tenant
}

// Identity is what a caller proved: the grants of its token and of its
// certificate, any of which may allow a call.
type Identity struct {
	Grants []Grant
}

// Permits reports whether any grant may call a method open to roles.
func (id Identity) Permits(roles Role) bool {
	for _, g := range id.Grants {
		if g.Permits(roles) {
			return true
		}
	}
	return false
}

// Holds reports whether any grant holds role r itself (not merely a
// role that may do what r may): Holds(Member) is true of a member's
// certificate only, not of an admin's.
func (id Identity) Holds(r Role) bool {
	for _, g := range id.Grants {
		if g.Role&r != 0 {
			return true
		}
	}
	return false
}

// MayReportAs reports whether any grant may report as node in region.
func (id Identity) MayReportAs(node, region string) bool {
	for _, g := range id.Grants {
		if g.MayReportAs(node, region) {
			return true
		}
	}
	return false
}

// MayReadBalance reports whether any grant may read tenant's balance.
func (id Identity) MayReadBalance(tenant string) bool {
	for _, g := range id.Grants {
		if g.MayReadBalance(tenant) {
			return true
		}
	}
	return false
}

// Name names the caller for logs: its grants' names.
func (id Identity) Name() string {
	names := make([]string, len(id.Grants))
	for i, g := range id.Grants {
		names[i] = g.Name
	}
	return strings.Join(names, ",")
}
