package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/allot-io/allot/internal/auth"
	"github.com/allot-io/allot/internal/duration"
	"github.com/allot-io/allot/internal/plural"
	"github.com/allot-io/allot/internal/strictyaml"
	"github.com/allot-io/allot/internal/tracing"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/trace"
	"go.yaml.in/yaml/v3"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// flags is a command's flag set, with the environment and a config file
// as fallbacks for flags not given on the command line.
type flags struct {
	*flag.FlagSet
	cmd    string
	config string
	help   func() // prints --help; its Command sets it
	env    *env
	// origin names where each flag not on the command line got its
	// value: an ALLOT_ variable, or the config file and line.
	origin map[string]string
}

// newFlags makes the flag set of the command cmd ("rules get").
func newFlags(e *env, cmd string) *flags {
	fs := flag.NewFlagSet("allot "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := &flags{FlagSet: fs, cmd: cmd, env: e, help: func() {}}
	fs.StringVar(&f.config, "config", "", "read flags from this YAML file (flag name: value)")
	fs.Usage = func() {} // errors are reported once, by report
	return f
}

// firstFlag is the flag --help gives as its example of the environment:
// --token-file where there is one (the way to present a token that the
// docs recommend), else the first flag.
func firstFlag(fs *flag.FlagSet) string {
	if fs.Lookup("token-file") != nil {
		return "token-file"
	}
	name := "config"
	fs.VisitAll(func(f *flag.Flag) {
		if name == "config" && f.Name != "config" {
			name = f.Name
		}
	})
	return name
}

// envName is the environment variable for a flag.
func envName(flagName string) string {
	return "ALLOT_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parse reads the command line, then fills the flags it did not set from
// the environment and then from the config file. It returns errHelp for
// --help and a usage error for anything malformed.
func (f *flags) parse(e *env) error {
	restore := explainDurations(f.FlagSet)
	defer restore()
	if err := f.Parse(e.args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			restore() // --help names a duration flag's type as the flag package does
			f.help()
			return errHelp
		}
		return usagef(f.cmd, "%v", err)
	}
	set := map[string]bool{}
	f.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if !set["config"] {
		if v := e.getenv(envName("config")); v != "" {
			f.config = v
		}
	}
	var fromFile map[string]configValue
	if f.config != "" {
		var err error
		if fromFile, err = readConfig(f.config, f.FlagSet); err != nil {
			return usagef(f.cmd, "%v", err)
		}
	}
	var errs []string
	f.VisitAll(func(fl *flag.Flag) {
		if set[fl.Name] || fl.Name == "config" {
			return
		}
		val, src, ok := e.getenv(envName(fl.Name)), envName(fl.Name), false
		if val != "" {
			ok = true
		} else if v, in := fromFile[fl.Name]; in {
			val, src, ok = v.value, fmt.Sprintf("%s:%d", f.config, v.line), true
		}
		if ok {
			if err := fl.Value.Set(val); err != nil {
				errs = append(errs, fmt.Sprintf("%s (from %s): %q: %v", fl.Name, src, val, err))
			}
			if f.origin == nil {
				f.origin = map[string]string{}
			}
			f.origin[fl.Name] = src
		}
	})
	if len(errs) > 0 {
		return usagef(f.cmd, "invalid value for %s", strings.Join(errs, "; "))
	}
	return nil
}

// notOnCommandLine says which flags took their value from the
// environment or the config file, for an error about the configuration
// they make: an ALLOT_CA exported for the client commands applies to a
// server started in the same shell too, and the error names a setting,
// not where it came from. Empty when every flag came from the command
// line.
func (f *flags) notOnCommandLine() string {
	if len(f.origin) == 0 {
		return ""
	}
	var from []string
	for _, name := range slices.Sorted(maps.Keys(f.origin)) {
		from = append(from, fmt.Sprintf("--%s from %s", name, f.origin[name]))
	}
	return " (set outside the command line: " + strings.Join(from, ", ") + ")"
}

// durationFlag is a duration flag that says what to write instead of a
// value Go's durations refuse (1d: use 24h), where the flag package says
// only "parse error".
type durationFlag struct{ flag.Value }

func (d durationFlag) Set(s string) error {
	if _, err := duration.Parse(s); err != nil {
		var de *duration.Error
		if errors.As(err, &de) {
			return errors.New(de.Hint)
		}
		return err
	}
	return d.Value.Set(s)
}

// explainDurations makes every duration flag of fs a durationFlag, and
// returns the function that puts them back.
func explainDurations(fs *flag.FlagSet) (restore func()) {
	var wrapped []*flag.Flag
	fs.VisitAll(func(fl *flag.Flag) {
		if g, ok := fl.Value.(flag.Getter); ok {
			if _, ok := g.Get().(time.Duration); ok {
				fl.Value = durationFlag{fl.Value}
				wrapped = append(wrapped, fl)
			}
		}
	})
	return func() {
		for _, fl := range wrapped {
			if d, ok := fl.Value.(durationFlag); ok {
				fl.Value = d.Value
			}
		}
	}
}

// configValue is a flag's value in a config file, and its line.
type configValue struct {
	value string
	line  int
}

// readConfig reads a YAML mapping of flag names to values. An unknown
// name, or a name given twice, is an error naming the file and line.
func readConfig(path string, fs *flag.FlagSet) (map[string]configValue, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	root, err := strictyaml.Parse(data)
	if err != nil {
		if line, msg := strictyaml.Location(err); line > 0 {
			return nil, fmt.Errorf("config %s:%d: %s", path, line, msg)
		}
		return nil, fmt.Errorf("config %s: %v", path, err)
	}
	out := map[string]configValue{}
	if root == nil || len(root.Content) == 0 {
		return out, nil
	}
	m := root.Content[0]
	if m.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("config %s:%d: want a mapping of flag names to values", path, m.Line)
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if fs.Lookup(k.Value) == nil || k.Value == "config" {
			return nil, fmt.Errorf("config %s:%d: unknown flag %q for this command", path, k.Line, k.Value)
		}
		switch v.Kind {
		case yaml.ScalarNode:
			out[k.Value] = configValue{v.Value, k.Line}
		case yaml.SequenceNode:
			var items []string
			for _, it := range v.Content {
				if it.Kind != yaml.ScalarNode {
					return nil, fmt.Errorf("config %s:%d: %s: list items must be plain values", path, it.Line, k.Value)
				}
				items = append(items, it.Value)
			}
			out[k.Value] = configValue{strings.Join(items, ","), k.Line}
		default:
			return nil, fmt.Errorf("config %s:%d: %s: want a value or a list", path, v.Line, k.Value)
		}
	}
	return out, nil
}

// exactlyOne returns the one positional argument a command takes, or a
// usage error saying what was wanted.
func exactlyOne(cmd, what string, args []string) (string, error) {
	if len(args) != 1 {
		return "", usagef(cmd, "want one %s, got %s", what, plural.Count(len(args), "argument"))
	}
	return args[0], nil
}

// noArgs refuses positional arguments.
func (f *flags) noArgs() error {
	if f.NArg() > 0 {
		return usagef(f.cmd, "unexpected argument %q", f.Arg(0))
	}
	return nil
}

// logFlags are the logging flags of the long-running commands.
type logFlags struct {
	level string
	json  bool
}

func (l *logFlags) register(f *flags) {
	f.StringVar(&l.level, "log-level", "info", "trace, debug, info, warn or error")
	f.BoolVar(&l.json, "log-json", false, "log as JSON lines")
}

// validate returns a usage error for a bad --log-level.
func (l *logFlags) validate(cmd string) error {
	if hclog.LevelFromString(l.level) == hclog.NoLevel {
		return usagef(cmd, "--log-level %q: want trace, debug, info, warn or error", l.level)
	}
	return nil
}

// logger builds the command's logger, or a usage error for a bad level.
func (l *logFlags) logger(cmd, name string, w io.Writer) (hclog.Logger, error) {
	if err := l.validate(cmd); err != nil {
		return nil, err
	}
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.LevelFromString(l.level), JSONFormat: l.json, Output: w}), nil
}

// credFlags are the credential flags shared by every command that calls
// or serves coordinators. Every file is re-read when it changes.
type credFlags struct {
	cert, key, ca, tokenFile string
}

// register adds the flags as a client of the coordinators has them: the
// CLI's commands and the agent, which call coordinators and serve none.
func (t *credFlags) register(f *flags) {
	t.registerAs(f,
		"PEM client certificate (with --key), presented to the coordinators for mutual TLS",
		"PEM CA bundle the coordinators' certificates are verified against")
}

// registerServing adds the flags as a coordinator has them: it serves
// its certificate and calls its peers with it.
func (t *credFlags) registerServing(f *flags) {
	t.registerAs(f,
		"PEM certificate (with --key): served to callers and peers, and presented to peers for mutual TLS",
		"PEM CA bundle peers' and callers' certificates are verified against")
}

func (t *credFlags) registerAs(f *flags, certUsage, caUsage string) {
	f.StringVar(&t.cert, "cert", "", certUsage)
	f.StringVar(&t.key, "key", "", "PEM private key of --cert")
	f.StringVar(&t.ca, "ca", "", caUsage)
	f.StringVar(&t.tokenFile, "token-file", "", "file holding the bearer token to present (sent only over TLS or to loopback)")
	// The names before roles existed.
	f.StringVar(&t.cert, "tls-cert", "", "old name of --cert")
	f.StringVar(&t.key, "tls-key", "", "old name of --key")
	f.StringVar(&t.ca, "tls-ca", "", "old name of --ca")
}

// transport is the transport credentials for dialling coordinators:
// TLS when a CA or certificate is given, plaintext otherwise.
func (t *credFlags) transport(onError func(error)) (credentials.TransportCredentials, error) {
	if t.cert == "" && t.ca == "" {
		return insecure.NewCredentials(), nil
	}
	r, err := auth.NewReloader(auth.TLSFiles{CertFile: t.cert, KeyFile: t.key, CAFile: t.ca}, onError)
	if err != nil {
		return nil, err
	}
	return r.ClientCredentials(), nil
}

// dialOptions are the options to dial coordinators with these
// credentials.
func (t *credFlags) dialOptions(onError func(error)) ([]grpc.DialOption, error) {
	creds, err := t.transport(onError)
	if err != nil {
		return nil, err
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if t.tokenFile != "" {
		tok, err := auth.NewTokenCredentials(t.tokenFile, onError)
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.WithPerRPCCredentials(tok))
	}
	return opts, nil
}

// clientFlags are the flags of the operator commands: which coordinators
// to call and with what credentials.
type clientFlags struct {
	coordinators string
	token        string
	timeout      time.Duration
	creds        credFlags
	trace        *cliTrace // nil for flags made by hand: no tracing
	cmd          string    // the command whose flags these are, for its errors
}

// client registers the flags of a command that calls the cluster.
func (f *flags) client() *clientFlags {
	var c clientFlags
	c.register(f)
	return &c
}

func (c *clientFlags) register(f *flags) {
	f.StringVar(&c.coordinators, "coordinator", "127.0.0.1:7400", "gRPC addresses of coordinators, comma-separated; any member will do")
	c.registerAccess(f)
}

// registerAccess adds every client flag but --coordinator: how to call,
// not whom.
func (c *clientFlags) registerAccess(f *flags) {
	c.cmd = f.cmd
	f.StringVar(&c.token, "admin-token", "", "a bearer token as a value, which shows in ps and shell history: prefer --token-file (ALLOT_TOKEN_FILE)")
	f.DurationVar(&c.timeout, "timeout", 10*time.Second, "how long to wait for the cluster")
	c.creds.register(f)
	c.trace = &cliTrace{cmd: f.cmd, e: f.env}
	c.trace.registerClient(f)
}

// coordinatorClient calls a coordinator cluster, trying each address in
// turn until one answers.
type coordinatorClient struct {
	addrs []string
	conns []*grpc.ClientConn
	how   callCreds // what the calls present, to explain refusals
	// root is the command's span, the parent of every call made with a
	// context holding none; nil when tracing is off.
	root trace.Span
}

func (c *clientFlags) dial() (*coordinatorClient, error) {
	addrs := splitList(c.coordinators)
	if len(addrs) == 0 {
		return nil, errors.New("no --coordinator address")
	}
	opts, err := c.creds.dialOptions(nil)
	if err != nil {
		return nil, err
	}
	opts = append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if c.token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(auth.StaticTokenCredentials(c.token)))
	}
	tr, root, err := c.trace.start()
	if err != nil {
		return nil, err
	}
	opts = append(opts, tracing.DialOptions(tr)...)
	cl := &coordinatorClient{addrs: addrs, how: callCreds{creds: c.creds, tokenValue: c.token != ""}, root: root}
	for _, a := range addrs {
		cc, err := grpc.NewClient(a, opts...)
		if err != nil {
			cl.Close()
			return nil, fmt.Errorf("coordinator address %q: %w", a, err)
		}
		cl.conns = append(cl.conns, cc)
	}
	return cl, nil
}

// connect dials the coordinators the command line names. What fails
// here is in the flags (no address, a certificate that cannot be read),
// so it is a usage error that points at the command's --help.
func (c *clientFlags) connect() (*coordinatorClient, error) {
	cl, err := c.dial()
	if err != nil {
		return nil, &usageError{err: err, hint: c.cmd}
	}
	return cl, nil
}

func (cl *coordinatorClient) Close() {
	for _, cc := range cl.conns {
		cc.Close()
	}
}

// call runs fn against each coordinator in turn until one answers with
// something other than Unavailable or a timeout. A failure that is the
// caller's own configuration (TLS against plaintext, an unknown CA, a
// missing or refused token) is returned as its cause and the flag that
// fixes it.
func (cl *coordinatorClient) call(ctx context.Context, fn func(ctx context.Context, cc *grpc.ClientConn) error) error {
	if cl.root != nil && !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = trace.ContextWithSpan(ctx, cl.root)
	}
	var errs []string
	var explained error
	for i, cc := range cl.conns {
		err := fn(ctx, cc)
		code := status.Code(err)
		if code == codes.OK {
			return nil
		}
		if code == codes.Unavailable && allotReason(err) != "" {
			return err // the cluster answered that something behind it is away: its reason says what, for the caller
		}
		ex := cl.how.explain(ctx, cl.addrs[i], err)
		if code != codes.Unavailable && code != codes.DeadlineExceeded {
			if ex != nil {
				return ex // the cluster answered: the others would say the same
			}
			return grpcErr(err)
		}
		if explained == nil {
			explained = ex
		}
		errs = append(errs, fmt.Sprintf("%s: %v", cl.addrs[i], status.Convert(err).Message()))
		if ctx.Err() != nil {
			break
		}
	}
	if explained != nil {
		return explained
	}
	return fmt.Errorf("no coordinator answered: %s", strings.Join(errs, "; "))
}

// allotReason is the reason of the google.rpc.ErrorInfo of Allot's
// domain that err carries (allotpb.Reason…); "" when none.
func allotReason(err error) string {
	r, _ := allotErrorInfo(err)
	return r
}

// allotErrorInfo is the reason and metadata of the google.rpc.ErrorInfo
// of Allot's domain that err carries; "" and nil when none.
func allotErrorInfo(err error) (reason string, metadata map[string]string) {
	st, ok := status.FromError(err)
	if !ok {
		return "", nil
	}
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetDomain() == allotpb.ErrorDomain {
			return ei.GetReason(), ei.GetMetadata()
		}
	}
	return "", nil
}

// grpcErr turns a gRPC status into a plain error: its message, and the
// code when it says more than the message.
func grpcErr(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	switch st.Code() {
	case codes.InvalidArgument:
		return fmt.Errorf("%w: %s", errRejected, st.Message())
	case codes.Unauthenticated:
		return fmt.Errorf("not allowed: %s (pass --token-file FILE or ALLOT_TOKEN_FILE, or --cert and --key)", st.Message())
	case codes.PermissionDenied:
		return fmt.Errorf("not allowed: %s (this credential's role may not do it)", st.Message())
	case codes.NotFound:
		return fmt.Errorf("not found: %s", st.Message())
	}
	return fmt.Errorf("%s: %s", st.Code(), st.Message())
}

// errRejected is wrapped when the cluster refused what was sent as invalid.
var errRejected = errors.New("rejected")

// isSet reports whether a flag was given: on the command line, in the
// environment or in the config file.
func (f *flags) isSet(name string) bool {
	set := false
	f.Visit(func(fl *flag.Flag) { set = set || fl.Name == name })
	return set
}
