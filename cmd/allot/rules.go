package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/allot-io/allot/lease/rules"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/proto/rulespb"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

const rulesAbout = `
Reads and changes the rules the coordinator cluster enforces, and checks
rule files offline.

  get [NAME]         print every rule, or one, as a rules file
  put FILE           create or replace the file's rules (--replace-all: and delete the rest)
  delete NAME        delete one rule
  validate FILE      check a rules file without a cluster
  import FILE...     convert envoyproxy/ratelimit configuration (--from envoy-ratelimit)

Changes need an admin credential when the cluster has credentials:
--token-file FILE (or ALLOT_TOKEN_FILE) with an admin token, or --cert
and --key. Run 'allot rules <subcommand> --help' for its flags.`

// subcommand is one verb of a command with several (rules, cluster).
type subcommand struct {
	name string
	run  func(ctx context.Context, e *env) error
}

// runSubcommand dispatches to one of a command's verbs. With no verb, or
// an unknown one, it is a usage error; --help prints about.
func runSubcommand(ctx context.Context, e *env, cmd, about string, subs []subcommand) error {
	if len(e.args) == 0 {
		return usagef(cmd, "missing subcommand")
	}
	switch e.args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprintf(e.stdout, "usage: allot %s <subcommand> [flags]\n\n%s\n", cmd, strings.TrimSpace(about))
		return errHelp
	}
	for _, s := range subs {
		if s.name == e.args[0] {
			sub := *e
			sub.args = e.args[1:]
			return s.run(ctx, &sub)
		}
	}
	return usagef(cmd, "unknown subcommand %q", e.args[0])
}

// parseArgs parses a command line whose positional arguments may come
// before, between or after its flags ("allot rules get NAME --format
// json"): the flag package alone stops at the first positional argument.
// It returns the positional arguments.
func parseArgs(f *flags, e *env) ([]string, error) {
	var flagArgs, positional []string
	for i := 0; i < len(e.args); i++ {
		a := e.args[i]
		if a == "--" {
			positional = append(positional, e.args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			positional = append(positional, a)
			continue
		}
		flagArgs = append(flagArgs, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		// A flag that takes a value takes the next argument, even one
		// that looks like a flag, as the flag package does.
		if fl := f.Lookup(name); fl != nil && !isBoolFlag(fl) && i+1 < len(e.args) {
			i++
			flagArgs = append(flagArgs, e.args[i])
		}
	}
	sub := *e
	sub.args = flagArgs
	if err := f.parse(&sub); err != nil {
		return nil, err
	}
	return positional, nil
}

func isBoolFlag(fl *flag.Flag) bool {
	b, ok := fl.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// once runs one call against the cluster, bounded by --timeout.
func (c *clientFlags) once(ctx context.Context, cl *coordinatorClient, fn func(ctx context.Context, cc *grpc.ClientConn) error) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	return cl.call(ctx, fn)
}

func runRules(ctx context.Context, e *env) error {
	return runSubcommand(ctx, e, "rules", rulesAbout, []subcommand{
		{"get", runRulesGet},
		{"put", runRulesPut},
		{"delete", runRulesDelete},
		{"validate", runRulesValidate},
		{"import", runRulesImport},
	})
}

const rulesGetAbout = `
Prints the cluster's rules, or the rule NAME, as a rules file: edit it and
apply it with 'allot rules put'. The YAML output starts with a comment
giving the version of the rule set. The JSON output is a rules file too
(JSON is YAML); its version goes to stderr.

The member called answers from its replica, which may lag a change made a
moment ago by up to a Raft heartbeat.`

func runRulesGet(ctx context.Context, e *env) error {
	const cmd = "rules get"
	f := newFlags(e, cmd, "[NAME] [--format yaml|json] [flags]", rulesGetAbout)
	var cf clientFlags
	var format string
	cf.register(f)
	f.StringVar(&format, "format", "yaml", "output format: yaml or json")
	args, err := parseArgs(f, e)
	if err != nil {
		return err
	}
	if len(args) > 1 {
		return usagef(cmd, "want at most one rule name, got %d arguments", len(args))
	}
	if format != "yaml" && format != "json" {
		return usagef(cmd, "--format %q: want yaml or json", format)
	}
	cl, err := cf.dial()
	if err != nil {
		return &usageError{err: err, hint: cmd}
	}
	defer cl.Close()
	set, err := listRules(ctx, &cf, cl)
	if err != nil {
		return err
	}
	list := set.GetRules()
	if len(args) == 1 {
		list = nil
		for _, r := range set.GetRules() {
			if r.GetName() == args[0] {
				list = append(list, r)
			}
		}
		if len(list) == 0 {
			return fmt.Errorf("not found: no rule named %q in the rules at version %d", args[0], set.GetVersion())
		}
	}
	if format == "json" {
		fmt.Fprintf(e.stderr, "rules version %d\n", set.GetVersion())
		return writeRulesJSON(e.stdout, list)
	}
	return writeRulesYAML(e.stdout, set.GetVersion(), len(args) == 1, list)
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
its rules by name, all or none. With --replace-all, rules not in FILE are
deleted. Prints the new version of the rule set and what changed, and
warns of each rule the cluster's region will not enforce (its regions
give that region no share).`

func runRulesPut(ctx context.Context, e *env) error {
	const cmd = "rules put"
	f := newFlags(e, cmd, "FILE [--replace-all] [flags]", rulesPutAbout)
	var cf clientFlags
	var replaceAll bool
	cf.register(f)
	f.BoolVar(&replaceAll, "replace-all", false, "delete every rule not in FILE")
	args, err := parseArgs(f, e)
	if err != nil {
		return err
	}
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
	cl, st, err := leaderClient(ctx, &cf)
	if err != nil {
		return err
	}
	defer cl.Close()
	before, err := listRules(ctx, &cf, cl)
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
	change := describeChange(before, after)
	if after.GetVersion() != before.GetVersion()+1 {
		change += " (and other changes made meanwhile)"
	}
	fmt.Fprintf(e.stdout, "rules version %d (%s): %s\n", after.GetVersion(), nounCount(len(after.GetRules()), "rule"), change)
	// A parent cluster divides limits among regions: it enforces every
	// region's share, its own region's or not.
	if region := st.GetRegion(); region != "" && st.GetTier().GetRole() != "parent" {
		for _, w := range regionWarnings(file, list, region) {
			fmt.Fprintf(e.stderr, "warning: %s\n", w)
		}
	}
	return nil
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

// describeChange says which rules a put created, changed and deleted.
func describeChange(before, after *allotpb.RuleSet) string {
	old := map[string]*allotpb.Rule{}
	for _, r := range before.GetRules() {
		old[r.GetName()] = r
	}
	var created, changed, unchanged []string
	for _, r := range after.GetRules() {
		switch o, ok := old[r.GetName()]; {
		case !ok:
			created = append(created, r.GetName())
		case !proto.Equal(o, r):
			changed = append(changed, r.GetName())
		default:
			unchanged = append(unchanged, r.GetName())
		}
		delete(old, r.GetName())
	}
	var parts []string
	for _, p := range []struct {
		verb  string
		names []string
	}{{"created", created}, {"changed", changed}, {"deleted", slices.Sorted(maps.Keys(old))}} {
		if len(p.names) > 0 {
			parts = append(parts, p.verb+" "+strings.Join(p.names, ", "))
		}
	}
	if len(unchanged) > 0 {
		parts = append(parts, fmt.Sprintf("%d unchanged", len(unchanged)))
	}
	if len(parts) == 0 {
		return "no rules"
	}
	return strings.Join(parts, "; ")
}

func runRulesDelete(ctx context.Context, e *env) error {
	const cmd = "rules delete"
	f := newFlags(e, cmd, "NAME [flags]", "Deletes the rule NAME from the cluster and prints the new version of the rule set.")
	var cf clientFlags
	cf.register(f)
	args, err := parseArgs(f, e)
	if err != nil {
		return err
	}
	name, err := exactlyOne(cmd, "rule name", args)
	if err != nil {
		return err
	}
	// A member checks that the rule exists in its own replica before it
	// forwards the delete; the leader's is never behind.
	cl, _, err := leaderClient(ctx, &cf)
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
	fmt.Fprintf(e.stdout, "deleted %s: rules version %d (%s)\n", name, after.GetVersion(), nounCount(len(after.GetRules()), "rule"))
	return nil
}

// putRequest is the request that puts a list of rules.
func putRequest(list []rules.Rule, replaceAll bool) *allotpb.PutRulesRequest {
	req := &allotpb.PutRulesRequest{ReplaceAll: replaceAll}
	for i := range list {
		req.Rules = append(req.Rules, rulespb.ToProto(&list[i]))
	}
	return req
}

func nounCount(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// ruleDoc is a rule as a rules file spells it (see lease/rules.Rule), with
// the period as a duration string: JSON would otherwise write nanoseconds,
// which the rules file reader refuses.
type ruleDoc struct {
	Name        string               `yaml:"name" json:"name"`
	Description string               `yaml:"description,omitempty" json:"description,omitempty"`
	Scope       string               `yaml:"scope" json:"scope"`
	Key         []string             `yaml:"key,omitempty,flow" json:"key,omitempty"`
	Match       *matchDoc            `yaml:"match,omitempty" json:"match,omitempty"`
	Algorithm   string               `yaml:"algorithm,omitempty" json:"algorithm,omitempty"`
	Limit       int64                `yaml:"limit,omitempty" json:"limit,omitempty"`
	Period      string               `yaml:"period,omitempty" json:"period,omitempty"`
	Burst       int64                `yaml:"burst,omitempty" json:"burst,omitempty"`
	Intent      string               `yaml:"intent,omitempty" json:"intent,omitempty"`
	Tolerance   *float64             `yaml:"tolerance,omitempty" json:"tolerance,omitempty"`
	FailMode    string               `yaml:"fail_mode,omitempty" json:"fail_mode,omitempty"`
	Local       bool                 `yaml:"local,omitempty" json:"local,omitempty"`
	Plans       map[string]planDoc   `yaml:"plans,omitempty" json:"plans,omitempty"`
	Tenants     map[string]tenantDoc `yaml:"tenants,omitempty" json:"tenants,omitempty"`
	Regions     map[string]float64   `yaml:"regions,omitempty,flow" json:"regions,omitempty"`
	Shadow      bool                 `yaml:"shadow,omitempty" json:"shadow,omitempty"`
	Unlimited   bool                 `yaml:"unlimited,omitempty" json:"unlimited,omitempty"`
	Replaces    []string             `yaml:"replaces,omitempty,flow" json:"replaces,omitempty"`
}

type matchDoc struct {
	Routes      []string        `yaml:"routes,omitempty,flow" json:"routes,omitempty"`
	Tenants     []string        `yaml:"tenants,omitempty,flow" json:"tenants,omitempty"`
	Plans       []string        `yaml:"plans,omitempty,flow" json:"plans,omitempty"`
	Domain      string          `yaml:"domain,omitempty" json:"domain,omitempty"`
	Descriptors []descriptorDoc `yaml:"descriptors,omitempty" json:"descriptors,omitempty"`
}

type descriptorDoc struct {
	Key   string `yaml:"key" json:"key"`
	Value string `yaml:"value,omitempty" json:"value,omitempty"`
}

// MarshalYAML writes a descriptor entry on one line.
func (e descriptorDoc) MarshalYAML() (any, error) {
	type fields descriptorDoc
	return flowNode(fields(e))
}

type planDoc struct {
	Limit  int64   `yaml:"limit,omitempty" json:"limit,omitempty"`
	Weight float64 `yaml:"weight,omitempty" json:"weight,omitempty"`
	Rank   uint32  `yaml:"rank,omitempty" json:"rank,omitempty"`
}

// MarshalYAML writes a plan on one line, {limit: 60000}, as people do.
// The conversion drops the method, so that encoding does not recurse.
func (p planDoc) MarshalYAML() (any, error) {
	type fields planDoc
	return flowNode(fields(p))
}

type tenantDoc struct {
	Limit  int64   `yaml:"limit,omitempty" json:"limit,omitempty"`
	Weight float64 `yaml:"weight,omitempty" json:"weight,omitempty"`
}

// MarshalYAML writes a tenant override on one line.
func (o tenantDoc) MarshalYAML() (any, error) {
	type fields tenantDoc
	return flowNode(fields(o))
}

// flowNode encodes v in YAML flow style.
func flowNode(v any) (*yaml.Node, error) {
	var n yaml.Node
	if err := n.Encode(v); err != nil {
		return nil, err
	}
	n.Style = yaml.FlowStyle
	return &n, nil
}

// docOf converts a wire rule to its rules file form.
func docOf(r *allotpb.Rule) ruleDoc {
	d := ruleDoc{
		Name: r.GetName(), Description: r.GetDescription(), Scope: r.GetScope(), Key: r.GetKey(),
		Algorithm: r.GetAlgorithm(), Limit: r.GetLimit(),
		Burst: r.GetBurst(), Intent: r.GetIntent(), Tolerance: r.Tolerance, FailMode: r.GetFailMode(),
		Local: r.GetLocal(), Regions: r.GetRegions(), Shadow: r.GetShadow(), Unlimited: r.GetUnlimited(), Replaces: r.GetReplaces(),
	}
	if p := r.GetPeriod().AsDuration(); p != 0 {
		d.Period = formatDuration(p)
	}
	if m := r.GetMatch(); len(m.GetRoutes())+len(m.GetTenants())+len(m.GetPlans())+len(m.GetDescriptors()) > 0 || m.GetDomain() != "" {
		d.Match = &matchDoc{Routes: m.GetRoutes(), Tenants: m.GetTenants(), Plans: m.GetPlans(), Domain: m.GetDomain()}
		for _, e := range m.GetDescriptors() {
			d.Match.Descriptors = append(d.Match.Descriptors, descriptorDoc{Key: e.GetKey(), Value: e.GetValue()})
		}
	}
	if len(r.GetPlans()) > 0 {
		d.Plans = make(map[string]planDoc, len(r.GetPlans()))
		for name, p := range r.GetPlans() {
			d.Plans[name] = planDoc{Limit: p.GetLimit(), Weight: p.GetWeight(), Rank: p.GetRank()}
		}
	}
	if len(r.GetTenants()) > 0 {
		d.Tenants = make(map[string]tenantDoc, len(r.GetTenants()))
		for name, o := range r.GetTenants() {
			d.Tenants[name] = tenantDoc{Limit: o.GetLimit(), Weight: o.GetWeight()}
		}
	}
	return d
}

// formatDuration writes a duration as a person would: 1m, 1h30m, 500ms,
// not 1m0s or 1h30m0s.
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// rulesFile is a rules file's top level, as lease/rules reads it.
type rulesFile struct {
	Rules []ruleDoc `yaml:"rules" json:"rules"`
}

func toFile(list []*allotpb.Rule) rulesFile {
	f := rulesFile{Rules: make([]ruleDoc, 0, len(list))}
	for _, r := range list {
		f.Rules = append(f.Rules, docOf(r))
	}
	return f
}

func writeRulesYAML(w io.Writer, version uint64, one bool, list []*allotpb.Rule) error {
	if one {
		fmt.Fprintf(w, "# Rule %s, from the rules at version %d.\n", list[0].GetName(), version)
	} else {
		fmt.Fprintf(w, "# Allot rules at version %d: %s.\n", version, nounCount(len(list), "rule"))
	}
	fmt.Fprintln(w, "# Apply an edited copy with: allot rules put FILE")
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(toFile(list)); err != nil {
		return fmt.Errorf("writing rules: %w", err)
	}
	return enc.Close()
}

func writeRulesJSON(w io.Writer, list []*allotpb.Rule) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(toFile(list)); err != nil {
		return fmt.Errorf("writing rules: %w", err)
	}
	return nil
}
