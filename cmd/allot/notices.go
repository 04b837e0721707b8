package main

import (
	"context"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
)

const noticesListAbout = `
Prints the threshold notices the cluster holds, by tenant, rule, cycle and
threshold: when each tenant's usage this cycle crossed each threshold of a
rule's notices, and whether the webhook (--notice-webhook) acknowledged it
(delivered) or it waits (pending). Any member answers, from its replica
(docs/billing.md#threshold-notices). Delivered notices are kept for a day,
or a cycle when longer, after their cycle ends; pending ones for 30 days.
Reading them needs the reader role when the cluster has credentials.`

func noticesCommand() *Command {
	return &Command{
		Name:  "notices",
		Short: "list threshold notices, pending and delivered",
		Long: `
Threshold notices: a rule's notices list fractions of the limit, and the
cluster records and posts to a webhook one notice each time a tenant's
usage this cycle crosses one (docs/billing.md#threshold-notices).`,
		Commands: []*Command{{
			Name: "list", Usage: "[--pending] [--tenant T] [--rule R] [--format table|jsonl] [flags]",
			Short: "the notices recorded (--pending: those not yet delivered)",
			Long:  noticesListAbout, Flags: noticesListFlags,
		}},
	}
}

func noticesListFlags(f *flags) runFunc {
	cmd := f.cmd
	cf := f.client()
	var (
		tenant, rule, form string
		pending            bool
	)
	f.BoolVar(&pending, "pending", false, "only the notices no receiver has acknowledged yet")
	f.StringVar(&tenant, "tenant", "", "only this tenant's")
	f.StringVar(&rule, "rule", "", "only this rule's")
	f.StringVar(&form, "format", "table", "output format: table, or jsonl (one notice a line)")
	return func(ctx context.Context, e *env, args []string) error {
		if form != "table" && form != "jsonl" {
			return usagef(cmd, "--format %q: want table or jsonl", form)
		}
		cl, err := cf.connect()
		if err != nil {
			return err
		}
		defer cl.Close()
		req := &allotpb.ListNoticesRequest{PendingOnly: pending, Tenant: tenant, Rule: rule, PageSize: 1000}
		var tw *tabwriter.Writer
		if form == "table" {
			tw = tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TENANT\tRULE\tCYCLE START\tTHRESHOLD\tUSED\tLIMIT\tCROSSED\tDELIVERED")
		}
		printed := 0
		for {
			var resp *allotpb.ListNoticesResponse
			err := cf.once(ctx, cl, func(ctx context.Context, cc *grpc.ClientConn) error {
				var err error
				resp, err = allotpb.NewUsageServiceClient(cc).ListNotices(ctx, req)
				return err
			})
			if err != nil {
				return fmt.Errorf("listing notices: %w", err)
			}
			for _, n := range resp.GetNotices() {
				printed++
				if tw == nil {
					b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(n)
					if err != nil {
						return err
					}
					if _, err := fmt.Fprintf(e.stdout, "%s\n", b); err != nil {
						return err
					}
					continue
				}
				delivered := "pending"
				if d := n.GetDeliveredUnixNano(); d != 0 {
					delivered = time.Unix(0, d).UTC().Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s%%\t%d\t%d\t%s\t%s\n", n.GetTenant(), n.GetRule(),
					time.Unix(n.GetCycleStartUnix(), 0).UTC().Format(time.RFC3339),
					strconv.FormatFloat(100*n.GetThreshold(), 'f', -1, 64), n.GetUsed(), n.GetLimit(),
					time.Unix(0, n.GetCrossedUnixNano()).UTC().Format(time.RFC3339), delivered)
			}
			if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
				break
			}
		}
		if printed == 0 {
			if tw == nil {
				fmt.Fprintln(e.stderr, "no notices")
				return nil
			}
			fmt.Fprintln(e.stdout, "no notices")
			return nil
		}
		if tw != nil {
			return tw.Flush()
		}
		return nil
	}
}
