package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
)

const balanceAbout = `
Prints a tenant's balance: for each rule keyed by the tenant alone, the
limit in force, what the tenant used this cycle in every region,
what remains, and when the cycle renews. Any member answers, from its
memory (docs/billing.md#balance).

Used is the committed ledger, through each gateway's last report: what
gateways admitted since is at most one report interval behind. A rule
whose plans set their own limits needs --plan (the coordinators keep no
tenant's plan) to show its limit. Reading it needs the reader role, or
a balance token for that tenant (allot token --role balance --tenant T).`

func balanceCommand() *Command {
	return &Command{
		Name: "balance", Args: "TENANT", Usage: "TENANT [--plan PLAN] [--format table|json] [flags]",
		Short: "show a tenant's limits, usage this cycle and what remains",
		Long:  balanceAbout, Flags: balanceFlags,
	}
}

func balanceFlags(f *flags) runFunc {
	cmd := f.cmd
	cf := f.client()
	var plan, form string
	f.StringVar(&plan, "plan", "", "the tenant's plan, for rules whose plans set their own limits")
	f.StringVar(&form, "format", "table", "output format: table, or json (the API's answer)")
	return func(ctx context.Context, e *env, args []string) error {
		if len(args) != 1 || args[0] == "" {
			return usagef(cmd, "want one tenant: allot balance TENANT")
		}
		if form != "table" && form != "json" {
			return usagef(cmd, "--format %q: want table or json", form)
		}
		cl, err := cf.connect()
		if err != nil {
			return err
		}
		defer cl.Close()
		var resp *allotpb.BalanceResponse
		err = cf.once(ctx, cl, func(ctx context.Context, cc *grpc.ClientConn) error {
			var err error
			resp, err = allotpb.NewBalanceServiceClient(cc).GetBalance(ctx, &allotpb.BalanceRequest{Tenant: args[0], Plan: plan})
			return err
		})
		if err != nil {
			return fmt.Errorf("reading the balance of %q: %w", args[0], err)
		}
		if form == "json" {
			b, err := protojson.MarshalOptions{EmitUnpopulated: true, UseProtoNames: true}.Marshal(resp)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(e.stdout, "%s\n", b)
			return err
		}
		return writeBalance(e.stdout, resp)
	}
}

// writeBalance prints a balance as a table, a rule a line; a limit the
// cluster could not tell (a plan's, without --plan) is "?".
func writeBalance(w io.Writer, b *allotpb.BalanceResponse) error {
	if len(b.GetRules()) == 0 {
		_, err := fmt.Fprintf(w, "tenant %s: no rule keyed by the tenant alone applies\n", b.GetTenant())
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tLIMIT\tUSED\tREMAINING\tOVERAGE\tRENEWS AT\tNOTE")
	for _, r := range b.GetRules() {
		limit, rem := "?", "?"
		if r.Limit != nil {
			limit = strconv.FormatInt(r.GetLimit(), 10) + " (" + r.GetLimitFrom() + ")"
			rem = strconv.FormatUint(r.GetRemaining(), 10)
		}
		note := ""
		switch {
		case r.Limit == nil:
			note = "limit depends on the plan: give --plan"
		case !r.GetComplete():
			note = "counted from " + r.GetCountedFrom().AsTime().Format(time.RFC3339) + " (older usage exported)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\t%s\n", r.GetRule(), limit, r.GetUsed(), rem, r.GetOverage(),
			r.GetRenewsAt().AsTime().Format(time.RFC3339), note)
	}
	fmt.Fprintf(tw, "\nas of %s; usage through each gateway's last report (every %s)\n",
		b.GetAt().AsTime().Format(time.RFC3339), b.GetReportInterval().AsDuration())
	return tw.Flush()
}
