package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/internal/auth"
	"github.com/allot-io/allot/internal/httproute"
	"github.com/allot-io/allot/rules"
)

// untilRulesFlag is --until-rules: closed, open or static:FILE.
type untilRulesFlag struct {
	policy agent.UntilRules
	file   string
}

func (u *untilRulesFlag) String() string {
	if u.policy == agent.UntilRulesStatic {
		return "static:" + u.file
	}
	return u.policy.String()
}

func (u *untilRulesFlag) Set(v string) error {
	name, file, withFile := strings.Cut(v, ":")
	p, err := agent.ParseUntilRules(name)
	switch {
	case err != nil:
		return errors.New("want closed, open or static:FILE")
	case p == agent.UntilRulesStatic && file == "":
		return errors.New("static needs the rules file to enforce until the cluster's arrive: static:FILE")
	case p != agent.UntilRulesStatic && withFile:
		return errors.New("only static takes a file: static:FILE")
	}
	u.policy, u.file = p, file
	return nil
}

// apply sets the policy on cfg, reading the static policy's rules file:
// the same format, and the same errors naming file and line, as --rules.
func (u *untilRulesFlag) apply(cfg *agent.Config) error {
	cfg.UntilRules = u.policy
	if u.policy != agent.UntilRulesStatic {
		return nil
	}
	rs, err := rules.Load(u.file)
	if err != nil {
		return &usageError{err: fmt.Errorf("--until-rules static: %w", err), hint: "agent"}
	}
	cfg.StartupRules = rs
	return nil
}

// startupFlags checks the flags of a sidecar's start-up against each
// other: the policy and the rules cache are for a sidecar that takes its
// rules from the cluster.
func startupFlags(cfg *agent.Config, until *untilRulesFlag, rulesFile string) error {
	switch {
	case rulesFile != "" && until.policy != agent.UntilRulesClosed:
		return usagef("agent", "--until-rules: the --rules file is enforced from the start, there is no time until rules")
	case rulesFile != "" && cfg.RulesCacheFile != "":
		return usagef("agent", "--rules-cache caches the cluster's rules; the --rules file is enforced instead of them")
	}
	return until.apply(cfg)
}

// listener is one of the sidecar's addresses that decides checks: whoever
// reaches it spends tenants' limits and adds to their bills.
type listener struct{ flag, addr string }

// errExposed is wrapped by the refusal of a listener beyond loopback
// without credentials.
var errExposed = errors.New("not a loopback address")

// checkExposed refuses, as the coordinator does, a listener that decides
// checks on an address beyond loopback unless its callers must present a
// credential (TLS with client certificates: --http-cert, --http-key and
// --http-client-ca), or --insecure says that whoever reaches it may.
func checkExposed(ls []listener, tls, clientCA, insecure bool) error {
	if insecure {
		return nil
	}
	for _, l := range ls {
		if l.addr == "" || isLoopbackAddr(l.addr) {
			continue
		}
		if !tls {
			return usagef("agent", "%s %s is %w and no credential is configured for its callers: anyone who reaches it could spend tenants' limits and add to their bills; "+
				"serve it over TLS with client certificates (--http-cert, --http-key, --http-client-ca), put the kubelet's probes and Prometheus on --probe-addr, or pass --insecure", l.flag, l.addr, errExposed)
		}
		if !clientCA {
			return usagef("agent", "%s %s is %w and --http-cert encrypts but does not say who may call: require client certificates with --http-client-ca, or pass --insecure", l.flag, l.addr, errExposed)
		}
	}
	return nil
}

// isLoopbackAddr reports whether a listen address binds loopback only.
func isLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && auth.IsLoopback(host)
}

// probeMux serves what the kubelet's probes and Prometheus need, and
// nothing that decides or reveals a check: /livez, /readyz (and /healthz)
// and /metrics. It is what --probe-addr serves, wherever it listens.
func probeMux(live, ready, metrics http.Handler) *httproute.Mux {
	mux := httproute.NewMux()
	mux.Handle("/livez", live)
	mux.Handle("/readyz", ready)
	mux.Handle("/healthz", ready)
	mux.Handle("/metrics", metrics)
	return mux
}
