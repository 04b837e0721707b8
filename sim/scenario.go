package sim

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/internal/strictyaml"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
	"go.yaml.in/yaml/v3"
)

// ErrInvalidScenario is wrapped by every scenario error.
var ErrInvalidScenario = errors.New("sim: invalid scenario")

// Scenario describes one simulation: a fleet, the limit under study, the
// traffic that meets it, and what goes wrong when.
type Scenario struct {
	Name        string        `yaml:"name"`
	Description string        `yaml:"description"`
	Nodes       int           `yaml:"nodes"`
	Duration    time.Duration `yaml:"duration"`
	// Warmup is left out of the run's figures: the time every strategy
	// needs to reach its steady state.
	Warmup time.Duration `yaml:"warmup"`
	// Interval is the agents' reporting interval.
	Interval time.Duration `yaml:"interval"`
	// Rate is the fleet's offered requests per second, over all tenants.
	Rate float64  `yaml:"rate"`
	Seed uint64   `yaml:"seed"`
	Rule RuleSpec `yaml:"rule"`
	// Tenants share the traffic.
	Tenants TenantSpec  `yaml:"tenants"`
	Traffic TrafficSpec `yaml:"traffic"`
	Network NetworkSpec `yaml:"network"`
	// Regions, when set, spreads the fleet over regions, each with its
	// own coordinator cluster, and divides the rule's limit among them.
	Regions *RegionsSpec `yaml:"regions"`
	// Shards, when set, splits the region's coordinators into shard
	// groups, each leader a server of limited capacity (shards.go).
	Shards *ShardsSpec `yaml:"shards"`
	Events []Event     `yaml:"events"`
}

// RegionsSpec spreads the fleet over Count regions (node i in region
// i mod Count), each with an equal static fraction of the rule's limit.
// Under quota-lease their clusters lease from a parent across a network
// of its own; the static-regions strategy divides the fractions alone,
// as a deployment without the tier does.
type RegionsSpec struct {
	Count int `yaml:"count"`
	// Interval is how often a region's cluster reports to the parent
	// (default 2s).
	Interval time.Duration `yaml:"interval"`
	// Delay, Jitter and Loss are the path between a region and the
	// parent, one way.
	Delay  time.Duration `yaml:"delay"`
	Jitter time.Duration `yaml:"jitter"`
	Loss   float64       `yaml:"loss"`
}

// regionInterval is how often a region reports to the parent.
func (r *RegionsSpec) regionInterval() time.Duration {
	if r.Interval > 0 {
		return r.Interval
	}
	return 2 * time.Second
}

// regionName names region i.
func regionName(i int) string { return fmt.Sprintf("region-%d", i) }

// RuleSpec is the limit under study. With scope tenant each tenant has the
// limit; with scope global the tenants share it.
type RuleSpec struct {
	Algorithm string        `yaml:"algorithm"`
	Limit     int64         `yaml:"limit"`
	Period    time.Duration `yaml:"period"`
	Burst     int64         `yaml:"burst"`
	Scope     string        `yaml:"scope"`
	Intent    string        `yaml:"intent"`
}

// TenantSpec says how many tenants there are and how traffic is spread
// over them.
type TenantSpec struct {
	Count int `yaml:"count"`
	// Zipf skews the tenants' shares of the rate (exponent s > 1); zero
	// spreads it evenly.
	Zipf float64 `yaml:"zipf"`
	// Weights, for global rules, are the tenants' weights by index; the
	// rest weigh 1.
	Weights []float64 `yaml:"weights"`
	// Arrival, when set, has tenant i start sending at i × Arrival, at
	// its full rate from its first request, as a new customer does; the
	// fleet's offered rate grows with the tenants sending (Rate is the
	// rate with all of them).
	Arrival time.Duration `yaml:"arrival"`
}

// TrafficSpec shapes the traffic in time and over nodes.
type TrafficSpec struct {
	// Sticky is how many nodes each tenant's traffic lands on: load
	// balancing is per connection, so a client stays on a few. Zero spreads
	// every tenant over all nodes.
	Sticky int `yaml:"sticky"`
	// Skew weighs a tenant's nodes unevenly (Zipf exponent); zero is even.
	Skew    float64      `yaml:"skew"`
	Bursts  *BurstSpec   `yaml:"bursts"`
	Diurnal *DiurnalSpec `yaml:"diurnal"`
}

// BurstSpec multiplies the rate by Factor for Length every Every.
type BurstSpec struct {
	Every  time.Duration `yaml:"every"`
	Length time.Duration `yaml:"length"`
	Factor float64       `yaml:"factor"`
}

// DiurnalSpec swings the rate by ±Amplitude over each Period.
type DiurnalSpec struct {
	Period    time.Duration `yaml:"period"`
	Amplitude float64       `yaml:"amplitude"`
}

// NetworkSpec is the path between agents and the coordinator.
type NetworkSpec struct {
	Delay  time.Duration `yaml:"delay"`
	Jitter time.Duration `yaml:"jitter"`
	Loss   float64       `yaml:"loss"`
}

// Event is something that happens At a time: exactly one of its fields.
type Event struct {
	At time.Duration `yaml:"at"`
	// Shift moves a tenant's traffic to other nodes.
	Shift *ShiftEvent `yaml:"shift"`
	// Join adds nodes; Leave removes them (the highest-numbered).
	Join  int `yaml:"join"`
	Leave int `yaml:"leave"`
	// Outage makes the coordinator unreachable for that long.
	Outage time.Duration `yaml:"outage"`
	// Failover elects a new coordinator leader, which learns for a lease
	// period.
	Failover bool `yaml:"failover"`
	// Partition cuts some nodes off the coordinator.
	Partition *PartitionEvent `yaml:"partition"`
	// Skew sets a node's clock off.
	Skew *SkewEvent `yaml:"skew"`
	// Restart replaces a node's process, as a deploy does: the old one
	// leaves cleanly (its usage flushed, its leases released), and a new
	// one, knowing nothing, takes its traffic once its first report is
	// answered, as a sidecar becomes ready.
	Restart *RestartEvent `yaml:"restart"`
	// Move moves a tenant's traffic to a region's gateways (with regions).
	Move *MoveEvent `yaml:"move"`
	// Isolate cuts a region's cluster off the parent for a while (with
	// regions); its gateways still reach their own cluster.
	Isolate *IsolateEvent `yaml:"isolate"`
	// MoveSlots moves a range of slots to another shard group (with
	// shards), by the mover's steps.
	MoveSlots *MoveSlotsEvent `yaml:"move_slots"`
}

// MoveSlotsEvent moves slots First..Last (inclusive) to group To.
type MoveSlotsEvent struct {
	First int `yaml:"first"`
	Last  int `yaml:"last"`
	To    int `yaml:"to"`
}

// MoveEvent moves tenant Tenant's traffic to region Region's gateways.
type MoveEvent struct {
	Tenant int `yaml:"tenant"`
	Region int `yaml:"region"`
}

// IsolateEvent cuts region Region's cluster off the parent For a while.
type IsolateEvent struct {
	Region int           `yaml:"region"`
	For    time.Duration `yaml:"for"`
}

// RestartEvent restarts node Node.
type RestartEvent struct {
	Node int `yaml:"node"`
}

// ShiftEvent moves a tenant's traffic to Sticky other nodes.
type ShiftEvent struct {
	Tenant int `yaml:"tenant"`
}

// PartitionEvent cuts Nodes nodes off the coordinator For a while.
type PartitionEvent struct {
	Nodes int           `yaml:"nodes"`
	For   time.Duration `yaml:"for"`
}

// SkewEvent sets Node's clock By ahead (or behind, when negative).
type SkewEvent struct {
	Node int           `yaml:"node"`
	By   time.Duration `yaml:"by"`
}

//go:embed scenarios/*.yaml
var builtin embed.FS

// Builtins lists the named scenarios that come with the simulator.
func Builtins() []string {
	entries, _ := builtin.ReadDir("scenarios")
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	return names
}

// Load returns a built-in scenario by name, or reads a scenario file.
func Load(nameOrFile string) (*Scenario, error) {
	if data, err := builtin.ReadFile("scenarios/" + nameOrFile + ".yaml"); err == nil {
		return Parse(nameOrFile, data)
	}
	if !strings.ContainsAny(nameOrFile, "/.") {
		return nil, fmt.Errorf("%w: no built-in scenario %q (built-ins: %s)", ErrInvalidScenario, nameOrFile, strings.Join(Builtins(), ", "))
	}
	f, err := os.Open(nameOrFile)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("sim: reading %s: %w", nameOrFile, err)
	}
	return Parse(filepath.Base(nameOrFile), data)
}

// Parse reads a scenario strictly: an unknown field or an impossible value
// is an error naming the field.
func Parse(name string, data []byte) (*Scenario, error) {
	root, err := strictyaml.Parse(data) // a key given twice is an error, not the last one
	if err != nil {
		if line, msg := strictyaml.Location(err); line > 0 {
			return nil, fmt.Errorf("%w: %s: line %d: %s", ErrInvalidScenario, name, line, msg)
		}
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalidScenario, name, err)
	}
	var s Scenario
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil && !errors.Is(err, io.EOF) {
		return nil, decodeError(name, root, err)
	}
	if s.Name == "" {
		s.Name = strings.TrimSuffix(name, ".yaml")
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// decodeError is the decoder's error, with a bad duration's field named
// and what to write instead ("1d": use 24h).
func decodeError(name string, root *yaml.Node, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return fmt.Errorf("%w: %s: %v", ErrInvalidScenario, name, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	durations := strictyaml.BadDurations(root, te)
	msgs := make([]string, len(te.Errors))
	for i, m := range te.Errors {
		msgs[i] = m
		if line, _ := strictyaml.Location(errors.New(m)); durations[line] != nil {
			msgs[i] = fmt.Sprintf("line %d: %s: %v", line, durations[line].Path, durations[line].Err)
		}
	}
	return fmt.Errorf("%w: %s: %s", ErrInvalidScenario, name, strings.Join(msgs, "; "))
}

// Validate reports the first impossible value, naming its field.
func (s *Scenario) Validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s: %s", ErrInvalidScenario, s.Name, field, fmt.Sprintf(format, args...))
	}
	switch {
	case s.Nodes < 1 || s.Nodes > 10000:
		return bad("nodes", "must be between 1 and 10000, got %d", s.Nodes)
	case s.Duration <= 0 || s.Duration > 24*time.Hour:
		return bad("duration", "must be positive and at most 24h, got %v", s.Duration)
	case s.Warmup < 0 || s.Warmup >= s.Duration:
		return bad("warmup", "must be at least 0 and shorter than the duration, got %v", s.Warmup)
	case s.Interval < 10*time.Millisecond || s.Interval > time.Minute:
		return bad("interval", "must be between 10ms and 1m, got %v", s.Interval)
	case !(s.Rate > 0) || s.Rate > 1e8:
		return bad("rate", "must be positive and at most 1e8 requests per second, got %v", s.Rate)
	case s.Tenants.Count < 1 || s.Tenants.Count > 100000:
		return bad("tenants.count", "must be between 1 and 100000, got %d", s.Tenants.Count)
	case s.Tenants.Arrival < 0:
		return bad("tenants.arrival", "must not be negative, got %v", s.Tenants.Arrival)
	case s.Tenants.Zipf != 0 && !(s.Tenants.Zipf > 1):
		return bad("tenants.zipf", "must be 0 (even) or above 1, got %v", s.Tenants.Zipf)
	case s.Traffic.Sticky < 0 || s.Traffic.Sticky > s.Nodes:
		return bad("traffic.sticky", "must be between 0 and nodes (%d), got %d", s.Nodes, s.Traffic.Sticky)
	case s.Traffic.Skew != 0 && !(s.Traffic.Skew > 1):
		return bad("traffic.skew", "must be 0 (even) or above 1, got %v", s.Traffic.Skew)
	case s.Network.Delay < 0 || s.Network.Jitter < 0 || s.Network.Delay+s.Network.Jitter >= s.Interval:
		return bad("network.delay", "delay and jitter must be at least 0 and add up to less than the interval")
	case s.Network.Loss < 0 || s.Network.Loss >= 1:
		return bad("network.loss", "must be in [0, 1), got %v", s.Network.Loss)
	}
	for i, w := range s.Tenants.Weights {
		if !(w > 0) {
			return bad(fmt.Sprintf("tenants.weights[%d]", i), "must be positive, got %v", w)
		}
	}
	if b := s.Traffic.Bursts; b != nil && (b.Every <= 0 || b.Length <= 0 || b.Length > b.Every || !(b.Factor > 0)) {
		return bad("traffic.bursts", "every and length must be positive with length ≤ every, and factor positive")
	}
	if d := s.Traffic.Diurnal; d != nil && (d.Period <= 0 || d.Amplitude < 0 || d.Amplitude >= 1) {
		return bad("traffic.diurnal", "period must be positive and amplitude in [0, 1)")
	}
	if g := s.Regions; g != nil {
		switch {
		case g.Count < 2 || g.Count > s.Nodes:
			return bad("regions.count", "must be between 2 and nodes (%d), got %d", s.Nodes, g.Count)
		case g.Interval < 0 || g.Interval > time.Minute:
			return bad("regions.interval", "must be between 0 (2s) and 1m, got %v", g.Interval)
		case g.Delay < 0 || g.Jitter < 0 || g.Delay+g.Jitter >= g.regionInterval():
			return bad("regions.delay", "delay and jitter must be at least 0 and add up to less than the regions' interval")
		case g.Loss < 0 || g.Loss >= 1:
			return bad("regions.loss", "must be in [0, 1), got %v", g.Loss)
		}
	}
	if _, err := s.rule(); err != nil {
		return bad("rule", "%v", err)
	}
	if err := s.Shards.validate(s); err != nil {
		return bad("shards", "%v", err)
	}
	nodes := s.Nodes
	for i, e := range s.Events {
		field := fmt.Sprintf("events[%d]", i)
		set := 0
		for _, on := range []bool{e.Shift != nil, e.Join != 0, e.Leave != 0, e.Outage != 0, e.Failover, e.Partition != nil, e.Skew != nil, e.Restart != nil, e.Move != nil, e.Isolate != nil, e.MoveSlots != nil} {
			if on {
				set++
			}
		}
		switch {
		case set != 1:
			return bad(field, "must set exactly one of shift, join, leave, outage, failover, partition, skew, restart, move, isolate, move_slots")
		case e.MoveSlots != nil:
			if err := s.Shards.validMove(e.MoveSlots, s.Events[:i]); err != nil {
				return bad(field+".move_slots", "%v", err)
			}
		case (e.Move != nil || e.Isolate != nil) && s.Regions == nil:
			return bad(field, "move and isolate need regions")
		case e.Move != nil && (e.Move.Tenant < 0 || e.Move.Tenant >= s.Tenants.Count || e.Move.Region < 0 || e.Move.Region >= s.Regions.Count):
			return bad(field+".move", "no tenant %d or no region %d", e.Move.Tenant, e.Move.Region)
		case e.Isolate != nil && (e.Isolate.Region < 0 || e.Isolate.Region >= s.Regions.Count || e.Isolate.For <= 0):
			return bad(field+".isolate", "region must be between 0 and %d and for positive", s.Regions.Count-1)
		case s.Regions != nil && (e.Join != 0 || e.Leave != 0):
			return bad(field, "join and leave are not simulated with regions")
		case e.At < 0 || e.At >= s.Duration:
			return bad(field+".at", "must be within the run (0 to %v), got %v", s.Duration, e.At)
		case e.Shift != nil && (e.Shift.Tenant < 0 || e.Shift.Tenant >= s.Tenants.Count):
			return bad(field+".shift.tenant", "no tenant %d", e.Shift.Tenant)
		case e.Join < 0 || e.Leave < 0:
			return bad(field, "join and leave must not be negative")
		case e.Leave >= nodes:
			return bad(field+".leave", "cannot remove %d of %d nodes", e.Leave, nodes)
		case e.Outage < 0:
			return bad(field+".outage", "must not be negative")
		case e.Partition != nil && (e.Partition.Nodes < 1 || e.Partition.Nodes > nodes || e.Partition.For <= 0):
			return bad(field+".partition", "nodes must be between 1 and %d and for positive", nodes)
		case e.Skew != nil && (e.Skew.Node < 0 || e.Skew.Node >= nodes):
			return bad(field+".skew.node", "no node %d", e.Skew.Node)
		case e.Restart != nil && (e.Restart.Node < 0 || e.Restart.Node >= nodes):
			return bad(field+".restart.node", "no node %d", e.Restart.Node)
		}
		nodes += e.Join - e.Leave
	}
	return nil
}

// rule is the rule under study, as the agents and coordinator enforce it.
func (s *Scenario) rule() (rules.Rule, error) {
	r := rules.Rule{Name: "studied", Limit: s.Rule.Limit, Period: s.Rule.Period, Burst: s.Rule.Burst}
	var err error
	if r.Algorithm, err = algo.ParseAlgorithm(s.Rule.Algorithm); err != nil {
		return r, fmt.Errorf("algorithm: %w", err)
	}
	if r.Intent, err = lease.ParseIntent(s.Rule.Intent); err != nil {
		return r, fmt.Errorf("intent: %w", err)
	}
	switch s.Rule.Scope {
	case "tenant", "":
		r.Scope = rules.Tenant
	case "global":
		r.Scope = rules.Global
		if len(s.Tenants.Weights) > 0 {
			r.Plans = map[string]rules.Plan{}
			for i, w := range s.Tenants.Weights {
				r.Plans[planOf(i)] = rules.Plan{Weight: w}
			}
		}
	default:
		return r, fmt.Errorf("scope: %q (want tenant or global)", s.Rule.Scope)
	}
	if g := s.Regions; g != nil && g.Count >= 2 {
		r.Regions = map[string]float64{}
		for i := range g.Count {
			r.Regions[regionName(i)] = 1 / float64(g.Count)
		}
	}
	if errs := r.Validate(); len(errs) > 0 {
		return r, errs[0]
	}
	return r, nil
}

// planOf names the plan that carries tenant i's weight.
func planOf(i int) string { return fmt.Sprintf("w%d", i) }

// weight is tenant i's weight.
func (s *Scenario) weight(i int) float64 {
	if i < len(s.Tenants.Weights) {
		return s.Tenants.Weights[i]
	}
	return 1
}
