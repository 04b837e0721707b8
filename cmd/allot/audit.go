package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"
)

const auditAbout = `
Prints the cluster's audit log, newest first: every change to rules,
overrides and membership (and resets), who made it (the name of the
token or certificate that called, or anonymous and its address without
credentials), when on the leader's clock, and for --format json what it
was before and after. Any member answers, from its replica
(docs/operations.md#audit-log).

--since and --until take an RFC 3339 time (2026-11-29T10:00:00Z), a date
(2026-11-29), a duration before now (24h, 7d) or now. --kind is rules,
overrides, membership or reset; --subject a rule's name, a member's ID,
a tenant or a rule/tenant key. Reading it needs the reader role when the
cluster has credentials.`

// auditKinds are the kinds --kind takes, as the cluster names them.
var auditKinds = []string{"rules", "overrides", "membership", "reset"}

func auditCommand() *Command {
	return &Command{
		Name: "audit", Usage: "[--since T] [--until T] [--actor NAME] [--kind K] [--subject S] [--limit N] [--format table|json] [flags]",
		Short: "show who changed rules, overrides and membership, and how",
		Long:  auditAbout, Flags: auditFlags,
	}
}

func auditFlags(f *flags) runFunc {
	cmd := f.cmd
	cf := f.client()
	var (
		since, until, actor, kind, sub, form string
		limit                                int
	)
	f.StringVar(&since, "since", "", "entries at or after this time (default: every entry kept)")
	f.StringVar(&until, "until", "", "entries before this time (default: up to now)")
	f.StringVar(&actor, "actor", "", "entries of this caller only: a token's or certificate's name, or anonymous")
	f.StringVar(&kind, "kind", "", "entries of this kind only: rules, overrides, membership or reset")
	f.StringVar(&sub, "subject", "", "entries that changed this rule, member, tenant or rule/tenant")
	f.IntVar(&limit, "limit", 100, "print at most this many entries, the newest (0: every one)")
	f.StringVar(&form, "format", "table", "output format: table, or json (one entry a line, with before and after)")
	return func(ctx context.Context, e *env, args []string) error {
		if form != "table" && form != "json" {
			return usagef(cmd, "--format %q: want table or json", form)
		}
		if kind != "" && !slices.Contains(auditKinds, kind) {
			return usagef(cmd, "--kind %q: want one of %s", kind, strings.Join(auditKinds, ", "))
		}
		if limit < 0 {
			return usagef(cmd, "--limit %d: want 0 (every entry) or more", limit)
		}
		req := &allotpb.ListAuditRequest{Actor: actor, Kind: kind, Subject: sub}
		now := time.Now()
		if since != "" {
			t, err := parseTime(since, now)
			if err != nil {
				return usagef(cmd, "--since %v", err)
			}
			req.From = timestamppb.New(t)
		}
		if until != "" {
			t, err := parseTime(until, now)
			if err != nil {
				return usagef(cmd, "--until %v", err)
			}
			req.To = timestamppb.New(t)
		}
		if req.From != nil && req.To != nil && !req.From.AsTime().Before(req.To.AsTime()) {
			return usagef(cmd, "--since %s is not before --until %s", req.From.AsTime().Format(time.RFC3339), req.To.AsTime().Format(time.RFC3339))
		}
		cl, err := cf.connect()
		if err != nil {
			return err
		}
		defer cl.Close()
		out := newAuditWriter(e.stdout, form)
		printed := 0
		for {
			req.PageSize = 1000
			if limit > 0 {
				req.PageSize = uint32(min(limit-printed, 1000))
			}
			var resp *allotpb.ListAuditResponse
			err := cf.once(ctx, cl, func(ctx context.Context, cc *grpc.ClientConn) error {
				var err error
				resp, err = allotpb.NewAuditServiceClient(cc).ListAudit(ctx, req)
				return err
			})
			if err != nil {
				return fmt.Errorf("reading the audit log: %w", err)
			}
			for _, en := range resp.GetEntries() {
				if err := out.write(en); err != nil {
					return err
				}
				printed++
			}
			if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" || limit > 0 && printed >= limit {
				break
			}
		}
		if printed == 0 {
			// Not a table with no lines, or no output at all: say so, on
			// stderr for JSON lines, which a script reads.
			if form == "json" {
				fmt.Fprintln(e.stderr, "no entries")
				return nil
			}
			fmt.Fprintln(e.stdout, "no entries")
			return nil
		}
		return out.flush()
	}
}

// auditWriter prints entries as a table or as JSON lines.
type auditWriter struct {
	tw  *tabwriter.Writer
	enc *json.Encoder
}

func newAuditWriter(w io.Writer, format string) *auditWriter {
	if format == "json" {
		return &auditWriter{enc: json.NewEncoder(w)}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tACTOR\tKIND\tACTION\tSUBJECTS\tCHANGED\tPEER")
	return &auditWriter{tw: tw}
}

// auditJSON is an entry as --format json prints it: before and after in
// protobuf's JSON form, with the .proto field names, which rules files
// spell their fields with.
type auditJSON struct {
	Seq       uint64          `json:"seq"`
	Time      string          `json:"time"`
	Actor     string          `json:"actor"`
	Peer      string          `json:"peer,omitempty"`
	Kind      string          `json:"kind"`
	Action    string          `json:"action"`
	Subjects  []string        `json:"subjects,omitempty"`
	Changed   uint32          `json:"changed"`
	Truncated bool            `json:"truncated,omitempty"`
	Before    json.RawMessage `json:"before,omitempty"`
	After     json.RawMessage `json:"after,omitempty"`
}

func auditTime(en *allotpb.AuditEntry) time.Time { return time.Unix(0, en.GetUnixNano()).UTC() }

func (w *auditWriter) write(en *allotpb.AuditEntry) error {
	if w.enc == nil {
		subjects := strings.Join(en.GetSubjects(), ",")
		if en.GetTruncated() {
			subjects += ",…"
		}
		fmt.Fprintf(w.tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", auditTime(en).Format(time.RFC3339), en.GetActor(), en.GetKind(), en.GetAction(), subjects, en.GetChanged(), en.GetPeer())
		return nil
	}
	j := auditJSON{
		Seq: en.GetSeq(), Time: auditTime(en).Format(time.RFC3339Nano), Actor: en.GetActor(), Peer: en.GetPeer(),
		Kind: en.GetKind(), Action: en.GetAction(), Subjects: en.GetSubjects(), Changed: en.GetChanged(), Truncated: en.GetTruncated(),
	}
	for _, side := range []struct {
		v   *allotpb.AuditValues
		out *json.RawMessage
	}{{en.GetBefore(), &j.Before}, {en.GetAfter(), &j.After}} {
		if side.v == nil {
			continue
		}
		b, err := (protojson.MarshalOptions{UseProtoNames: true}).Marshal(side.v)
		if err != nil {
			return fmt.Errorf("audit entry %d: %w", en.GetSeq(), err)
		}
		*side.out = b
	}
	return w.enc.Encode(j)
}

func (w *auditWriter) flush() error {
	if w.tw != nil {
		return w.tw.Flush()
	}
	return nil
}
