package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/allot-io/allot/internal/plural"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/proto/rulespb"
	"github.com/allot-io/allot/rules"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

func rulesCommand() *Command {
	return &Command{
		Name:  "rules",
		Short: "get, put, delete and validate rules",
		Long: `
Reads and changes the rules the coordinator cluster enforces, and checks
rule files offline.`,
		Notes: `
Changes need an admin credential when the cluster has credentials:
--token-file FILE (or ALLOT_TOKEN_FILE) with an admin token, or --cert
and --key.`,
		Commands: []*Command{
			{
				Name: "get", Args: "[NAME]", Usage: "[NAME] [--format yaml|json] [flags]",
				Short: "print every rule, or one, as a rules file",
				Long:  rulesGetAbout, Flags: rulesGetFlags,
			},
			{
				Name: "put", Args: "FILE", Usage: "FILE [--replace-all] [flags]",
				Short: "create or replace the file's rules (--replace-all: and delete the rest)",
				Long:  rulesPutAbout, Flags: rulesPutFlags,
			},
			{
				Name: "delete", Args: "NAME",
				Short: "delete one rule",
				Long:  "Deletes the rule NAME from the cluster and prints the new version of the rule set.",
				Flags: rulesDeleteFlags,
			},
			{
				Name: "validate", Args: "FILE", Usage: "FILE [--region R]",
				Short: "check a rules file without a cluster",
				Long:  rulesValidateAbout, Flags: rulesValidateFlags,
			},
			{
				Name: "import", Args: "FILE...", Usage: "--from envoy-ratelimit [--intent capacity|quota|abuse] [--shadow] [--out FILE] FILE|DIR...",
				Short: "convert envoyproxy/ratelimit configuration (--from envoy-ratelimit)",
				Long:  rulesImportAbout, Flags: rulesImportFlags,
			},
		},
	}
}

// once runs one call against the cluster, bounded by --timeout.
func (c *clientFlags) once(ctx context.Context, cl *coordinatorClient, fn func(ctx context.Context, cc *grpc.ClientConn) error) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	return cl.call(ctx, fn)
}

const rulesGetAbout = `
Prints the cluster's rules, or the rule NAME, as a rules file: edit it and
apply it with 'allot rules put --replace-all' (the whole set: rules deleted
from the file are deleted) or 'allot rules put' (one rule). The YAML output starts with a comment
giving the version of the rule set. The JSON output is a rules file too
(JSON is YAML); its version goes to stderr.

The member called answers from its replica, which may lag a change made a
moment ago by up to a Raft heartbeat.`

func rulesGetFlags(f *flags) runFunc {
	cmd := f.cmd
	cf := f.client()
	var format string
	f.StringVar(&format, "format", "yaml", "output format: yaml or json")
	return func(ctx context.Context, e *env, args []string) error {
		if len(args) > 1 {
			return usagef(cmd, "want at most one rule name, got %s", plural.Count(len(args), "argument"))
		}
		if format != "yaml" && format != "json" {
			return usagef(cmd, "--format %q: want yaml or json", format)
		}
		cl, err := cf.connect()
		if err != nil {
			return err
		}
		defer cl.Close()
		set, err := listRules(ctx, cf, cl)
		if err != nil {
			return err
		}
		wire := set.GetRules()
		if len(args) == 1 {
			wire = nil
			for _, r := range set.GetRules() {
				if r.GetName() == args[0] {
					wire = append(wire, r)
				}
			}
			if len(wire) == 0 {
				return fmt.Errorf("not found: no rule named %q in the rules at version %d", args[0], set.GetVersion())
			}
		}
		list, err := fromCluster(wire)
		if err != nil {
			return err
		}
		if format == "json" {
			fmt.Fprintf(e.stderr, "rules version %d\n", set.GetVersion())
			return writeRulesJSON(e.stdout, list)
		}
		return writeRulesYAML(e.stdout, set.GetVersion(), len(args) == 1, list)
	}
}

func listRules(ctx context.Context, cf *clientFlags, cl *coordinatorClient) (*allotpb.RuleSet, error) {
	var set *allotpb.RuleSet
	err := cf.once(ctx, cl, func(ctx context.Context, cc *grpc.ClientConn) error {
		var err error
		set, err = allotpb.NewRulesServiceClient(cc).ListRules(ctx, &allotpb.ListRulesRequest{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listing rules: %w", err)
	}
	return set, nil
}

const rulesPutAbout = `
Loads FILE, checks every rule in it as the cluster would (an error names
the file, line and field, and nothing is sent), then creates or replaces
its rules by name, all or none. Rules of the cluster that FILE leaves out
stay, and are named; with --replace-all they are deleted, so that the
cluster holds FILE's rules exactly (apply an edited 'allot rules get' so).
Prints the new version of the rule set and what changed; a put that
changes nothing keeps the version and says so. Warns of each rule the
cluster's region will not enforce (its regions give that region no
share).`

func rulesPutFlags(f *flags) runFunc {
	cmd := f.cmd
	cf := f.client()
	var replaceAll bool
	f.BoolVar(&replaceAll, "replace-all", false, "delete every rule not in FILE")
	return func(ctx context.Context, e *env, args []string) error {
		file, err := exactlyOne(cmd, "rules file", args)
		if err != nil {
			return err
		}
		list, err := loadRules(e.stderr, file)
		if err != nil {
			return err
		}
		if len(list) == 0 {
			// With --replace-all an empty file would delete every rule; make
			// that a deliberate act of 'rules delete' instead.
			return usagef(cmd, "%s holds no rules", file)
		}
		req := putRequest(list, replaceAll)
		// Sent to the leader, where the rules read before the put are current:
		// a follower's may lag by a heartbeat, and would misreport the change.
		cl, st, err := leaderClient(ctx, cf)
		if err != nil {
			return err
		}
		defer cl.Close()
		before, err := listRules(ctx, cf, cl)
		if err != nil {
			return err
		}
		var after *allotpb.RuleSet
		err = cf.once(ctx, cl, func(ctx context.Context, cc *grpc.ClientConn) error {
			var err error
			after, err = allotpb.NewRulesServiceClient(cc).PutRules(ctx, req)
			return err
		})
		if errors.Is(err, errRejected) {
			return &usageError{err: fmt.Errorf("%s: the cluster refused the rules: %w", file, err)}
		}
		if err != nil {
			return fmt.Errorf("putting rules: %w", err)
		}
		ch := describeChange(before, after, list)
		switch v := after.GetVersion(); {
		case v == before.GetVersion():
			// The cluster applies no put that changes nothing.
			fmt.Fprintf(e.stdout, "rules version %d kept (%s): nothing changed\n", v, plural.Count(len(after.GetRules()), "rule"))
		case v != before.GetVersion()+1:
			fmt.Fprintf(e.stdout, "rules version %d (%s): %s (and other changes made meanwhile)\n", v, plural.Count(len(after.GetRules()), "rule"), ch.summary())
		default:
			fmt.Fprintf(e.stdout, "rules version %d (%s): %s\n", v, plural.Count(len(after.GetRules()), "rule"), ch.summary())
		}
		if len(ch.kept) > 0 {
			fmt.Fprintf(e.stdout, "kept %s not in %s: %s (put --replace-all deletes the rules a file leaves out)\n",
				plural.Count(len(ch.kept), "rule"), file, strings.Join(ch.kept, ", "))
		}
		// A parent cluster divides limits among regions: it enforces every
		// region's share, its own region's or not.
		if region := st.GetRegion(); region != "" && st.GetTier().GetRole() != "parent" {
			for _, w := range regionWarnings(file, list, region) {
				fmt.Fprintf(e.stderr, "warning: %s\n", w)
			}
		}
		return nil
	}
}

// loadRules reads and validates a rules file offline. Validation errors
// are printed one a line, as file:line: field: message, and returned as a
// usage error: the file is bad input.
func loadRules(w io.Writer, path string) ([]rules.Rule, error) {
	list, err := rules.Load(path)
	if err == nil {
		return list, nil
	}
	problems := ruleProblems(err)
	if len(problems) == 0 {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe // without the "rules: " the command's name already gives
		}
		return nil, &usageError{err: fmt.Errorf("reading rules file: %w", err)}
	}
	for _, p := range problems {
		fmt.Fprintln(w, p)
	}
	noun := "problems"
	if len(problems) == 1 {
		noun = "problem"
	}
	return nil, &usageError{err: fmt.Errorf("%s: %d %s; nothing was changed", path, len(problems), noun)}
}

// ruleProblems formats each validation error in err as
// "file:line: field: message", the field named as the cluster names it
// (rules[NAME].limit). It returns nil for errors that are not about the
// file's contents, such as a missing file.
func ruleProblems(err error) []string {
	var es rules.Errors
	var one *rules.Error
	switch {
	case errors.As(err, &es):
	case errors.As(err, &one):
		es = rules.Errors{one}
	default:
		return nil
	}
	out := make([]string, 0, len(es))
	for _, e := range es {
		var parts []string
		loc := e.File
		if e.Line > 0 {
			loc += ":" + strconv.Itoa(e.Line)
		}
		if loc != "" {
			parts = append(parts, loc)
		}
		switch {
		case e.Rule != "" && e.Field != "":
			parts = append(parts, "rules["+e.Rule+"]."+e.Field)
		case e.Rule != "":
			parts = append(parts, "rules["+e.Rule+"]")
		case e.Field != "":
			parts = append(parts, e.Field)
		}
		out = append(out, strings.Join(append(parts, e.Msg), ": "))
	}
	return out
}

// ruleChange is what a put did, rule by rule.
type ruleChange struct {
	created, changed, deleted []string
	unchanged                 int // rules of the file that were already so
	// kept are the rules the file left out that the put kept: all those
	// it did not delete.
	kept []string
}

// describeChange says which rules a put of list created, changed, deleted
// and left as they were.
func describeChange(before, after *allotpb.RuleSet, list []rules.Rule) ruleChange {
	old := map[string]*allotpb.Rule{}
	for _, r := range before.GetRules() {
		old[r.GetName()] = r
	}
	inFile := map[string]bool{}
	for _, r := range list {
		inFile[r.Name] = true
	}
	var ch ruleChange
	for _, r := range after.GetRules() {
		switch o, ok := old[r.GetName()]; {
		case !ok:
			ch.created = append(ch.created, r.GetName())
		case !proto.Equal(o, r):
			ch.changed = append(ch.changed, r.GetName())
		case !inFile[r.GetName()]:
			ch.kept = append(ch.kept, r.GetName())
		default:
			ch.unchanged++
		}
		delete(old, r.GetName())
	}
	ch.deleted = slices.Sorted(maps.Keys(old))
	slices.Sort(ch.kept)
	return ch
}

// summary is the change on one line: "created a; changed b; 2 unchanged".
func (ch ruleChange) summary() string {
	var parts []string
	for _, p := range []struct {
		verb  string
		names []string
	}{{"created", ch.created}, {"changed", ch.changed}, {"deleted", ch.deleted}} {
		if len(p.names) > 0 {
			parts = append(parts, p.verb+" "+strings.Join(p.names, ", "))
		}
	}
	if ch.unchanged > 0 {
		parts = append(parts, fmt.Sprintf("%d unchanged", ch.unchanged))
	}
	if len(parts) == 0 {
		return "no rules"
	}
	return strings.Join(parts, "; ")
}

func rulesDeleteFlags(f *flags) runFunc {
	cmd := f.cmd
	cf := f.client()
	return func(ctx context.Context, e *env, args []string) error {
		name, err := exactlyOne(cmd, "rule name", args)
		if err != nil {
			return err
		}
		// A member checks that the rule exists in its own replica before it
		// forwards the delete; the leader's is never behind.
		cl, _, err := leaderClient(ctx, cf)
		if err != nil {
			return err
		}
		defer cl.Close()
		var after *allotpb.RuleSet
		err = cf.once(ctx, cl, func(ctx context.Context, cc *grpc.ClientConn) error {
			var err error
			after, err = allotpb.NewRulesServiceClient(cc).DeleteRule(ctx, &allotpb.DeleteRuleRequest{Name: name})
			return err
		})
		if err != nil {
			return fmt.Errorf("deleting rule %q: %w", name, err)
		}
		fmt.Fprintf(e.stdout, "deleted %s: rules version %d (%s)\n", name, after.GetVersion(), plural.Count(len(after.GetRules()), "rule"))
		return nil
	}
}

// putRequest is the request that puts a list of rules.
func putRequest(list []rules.Rule, replaceAll bool) *allotpb.PutRulesRequest {
	req := &allotpb.PutRulesRequest{ReplaceAll: replaceAll}
	for i := range list {
		req.Rules = append(req.Rules, rulespb.ToProto(&list[i]))
	}
	return req
}

// fromCluster converts the cluster's rules to the rule model, which the
// rules-file writer writes. A rule this allot cannot read, such as one
// using what a newer cluster added, is an error naming it: written out, it
// would not be the rule the cluster enforces.
func fromCluster(list []*allotpb.Rule) ([]rules.Rule, error) {
	out := make([]rules.Rule, 0, len(list))
	for _, p := range list {
		r, err := rulespb.FromProto(p)
		if err != nil {
			return nil, fmt.Errorf("reading the cluster's rule %q (is this allot older than the cluster?): %w", p.GetName(), err)
		}
		out = append(out, r)
	}
	return out, nil
}

func writeRulesYAML(w io.Writer, version uint64, one bool, list []rules.Rule) error {
	if one {
		fmt.Fprintf(w, "# Rule %s, from the rules at version %d.\n", list[0].Name, version)
	} else {
		fmt.Fprintf(w, "# Allot rules at version %d: %s.\n", version, plural.Count(len(list), "rule"))
	}
	if one {
		fmt.Fprintln(w, "# Apply an edited copy with: allot rules put FILE")
	} else {
		// The whole set: a rule deleted from the copy is meant to go.
		fmt.Fprintln(w, "# Apply an edited copy with: allot rules put --replace-all FILE")
		fmt.Fprintln(w, "# (without --replace-all, the rules you delete here stay in the cluster)")
	}
	return rules.WriteYAML(w, list)
}

func writeRulesJSON(w io.Writer, list []rules.Rule) error {
	return rules.WriteJSON(w, list)
}
