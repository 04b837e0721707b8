package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/allot-io/allot/internal/plural"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/grpc"
)

const resetAbout = `
Resets one key's counters fleet-wide: every agent's state for the key and
the coordinators' lease pool for it start afresh within a report
interval, while the usage ledger keeps what was counted (billing is
unaffected). Name the key by RULE and exactly the rule's key attributes:

  allot reset RULE --tenant T [--user U] [--route R] [--ip IP]
  allot reset RULE --tenant T --all-keys   every key of the tenant
  allot reset RULE                         a global rule's one key

A key the cluster has never seen (no usage of the tenant under the rule,
no lease pool) is refused as not found, and nothing changes. Resets need
an admin credential when the cluster has credentials
(docs/operations.md#resetting-a-key).`

func resetCommand() *Command {
	return &Command{
		Name: "reset", Args: "RULE", Usage: "RULE [--tenant T] [--user U] [--route R] [--ip IP] [--all-keys] [flags]",
		Short: "reset one key's counters fleet-wide, or list the resets",
		Long:  resetAbout, Flags: resetKeyFlags,
		Commands: []*Command{{
			Name: "list", Usage: "[--rule R] [--tenant T] [flags]",
			Short: "the resets recorded",
			Long:  "Prints the resets the cluster keeps (the newest 10,000), oldest first: version, when, who, what and why.",
			Flags: resetListFlags,
		}},
	}
}

func resetKeyFlags(f *flags) runFunc {
	cmd := f.cmd
	cf := f.client()
	var target allotpb.Reset
	f.StringVar(&target.Tenant, "tenant", "", "the key's tenant")
	f.StringVar(&target.User, "user", "", "the key's user")
	f.StringVar(&target.Route, "route", "", "the key's route")
	f.StringVar(&target.Ip, "ip", "", "the key's client IP")
	f.BoolVar(&target.AllKeys, "all-keys", false, "reset every key of --tenant under the rule")
	f.StringVar(&target.Reason, "reason", "", "a note kept with the reset (a support case)")
	return func(ctx context.Context, e *env, args []string) error {
		if len(args) != 1 {
			return usagef(cmd, "want RULE, got %s", plural.Count(len(args), "argument"))
		}
		target.Rule = args[0]
		cl, err := cf.connect()
		if err != nil {
			return err
		}
		defer cl.Close()
		var resp *allotpb.ResetKeysResponse
		err = cf.once(ctx, cl, func(ctx context.Context, cc *grpc.ClientConn) error {
			var err error
			resp, err = allotpb.NewResetsServiceClient(cc).ResetKeys(ctx, &allotpb.ResetKeysRequest{Target: &target})
			return err
		})
		if errors.Is(err, errRejected) {
			return &usageError{err: fmt.Errorf("the cluster refused the reset: %w", err)}
		}
		if err != nil {
			return err
		}
		r := resp.GetRecorded()
		fmt.Fprintf(e.stdout, "reset %d: %s; agents start it afresh within a report interval\n", r.GetVersion(), resetWhat(r))
		return nil
	}
}

// resetWhat names what a reset reset.
func resetWhat(r *allotpb.Reset) string {
	var parts []string
	for _, kv := range [][2]string{{"tenant", r.GetTenant()}, {"user", r.GetUser()}, {"route", r.GetRoute()}, {"ip", r.GetIp()}} {
		if kv[1] != "" {
			parts = append(parts, kv[0]+"="+kv[1])
		}
	}
	switch {
	case r.GetAllKeys():
		return fmt.Sprintf("every key of %s under %s", strings.Join(parts, " "), r.GetRule())
	case len(parts) == 0:
		return fmt.Sprintf("the one key of %s", r.GetRule())
	}
	return fmt.Sprintf("%s key %s", r.GetRule(), strings.Join(parts, " "))
}

func resetListFlags(f *flags) runFunc {
	cf := f.client()
	var rule, tenant string
	f.StringVar(&rule, "rule", "", "only this rule's resets")
	f.StringVar(&tenant, "tenant", "", "only this tenant's resets")
	return func(ctx context.Context, e *env, args []string) error {
		cl, err := cf.connect()
		if err != nil {
			return err
		}
		defer cl.Close()
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "VERSION\tAT\tBY\tRESET\tREASON")
		var since uint64
		for {
			var d *allotpb.ResetsDelta
			err = cf.once(ctx, cl, func(ctx context.Context, cc *grpc.ClientConn) error {
				var err error
				d, err = allotpb.NewResetsServiceClient(cc).ListResets(ctx, &allotpb.ListResetsRequest{Since: since, Rule: rule, Tenant: tenant})
				return err
			})
			if err != nil {
				return err
			}
			for _, r := range d.GetResets() {
				by := r.GetBy()
				if by == "" {
					by = "-"
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", r.GetVersion(), time.Unix(0, r.GetAtUnixNano()).UTC().Format(time.RFC3339), by, resetWhat(r), r.GetReason())
			}
			if !d.GetMore() {
				break
			}
			since = d.GetVersion()
		}
		return tw.Flush()
	}
}
