package rules

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// WriteYAML writes rules as a rules file that Parse reads back as the
// same rules, laid out as people write one: the period as 1h30m, a plan,
// a tenant override or a descriptor entry on one line, fields left out
// when unset. `allot rules get` and `allot rules import` print it.
func WriteYAML(w io.Writer, list []Rule) error {
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(toFile(list)); err != nil {
		return fmt.Errorf("writing rules: %w", err)
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("writing rules: %w", err)
	}
	return nil
}

// WriteJSON writes rules as a rules file in JSON, which Parse reads too
// (JSON is YAML): the same fields as WriteYAML's, indented.
func WriteJSON(w io.Writer, list []Rule) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(toFile(list)); err != nil {
		return fmt.Errorf("writing rules: %w", err)
	}
	return nil
}

// fileDoc is a rules file's top level, as Parse reads it.
type fileDoc struct {
	Rules []ruleDoc `yaml:"rules" json:"rules"`
}

// ruleDoc is a rule as a rules file spells it, with the period as a
// duration string: Rule's own encoding would write nanoseconds, which
// the reader refuses.
type ruleDoc struct {
	Name        string               `yaml:"name" json:"name"`
	Description string               `yaml:"description,omitempty" json:"description,omitempty"`
	Scope       string               `yaml:"scope" json:"scope"`
	Key         []string             `yaml:"key,omitempty,flow" json:"key,omitempty"`
	Match       *matchDoc            `yaml:"match,omitempty" json:"match,omitempty"`
	Algorithm   string               `yaml:"algorithm,omitempty" json:"algorithm,omitempty"`
	Limit       int64                `yaml:"limit,omitempty" json:"limit,omitempty"`
	Period      string               `yaml:"period,omitempty" json:"period,omitempty"`
	Cycle       *Anchor              `yaml:"cycle,omitempty,flow" json:"cycle,omitempty"`
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
	Notices     []float64            `yaml:"notices,omitempty,flow" json:"notices,omitempty"`
	Overage     *Overage             `yaml:"overage,omitempty,flow" json:"overage,omitempty"`
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
	Rank   uint8   `yaml:"rank,omitempty" json:"rank,omitempty"`
	Cycle  *Anchor `yaml:"cycle,omitempty" json:"cycle,omitempty"`
}

// anchorDoc is an anchor as a document writes it: nil, left out, for none.
func anchorDoc(a Anchor) *Anchor {
	if a.IsZero() {
		return nil
	}
	return &a
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
	Cycle  *Anchor `yaml:"cycle,omitempty" json:"cycle,omitempty"`
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

func toFile(list []Rule) fileDoc {
	f := fileDoc{Rules: make([]ruleDoc, 0, len(list))}
	for i := range list {
		f.Rules = append(f.Rules, docOf(&list[i]))
	}
	return f
}

// docOf is a rule in its rules file form. Unset enumerations (and a scope
// that is none of the six) are left out.
func docOf(r *Rule) ruleDoc {
	d := ruleDoc{
		Name: r.Name, Description: r.Description, Limit: r.Limit, Burst: r.Burst, Tolerance: r.Tolerance,
		Local: r.Local, Regions: r.Regions, Shadow: r.Shadow, Unlimited: r.Unlimited, Replaces: r.Replaces,
		Notices: r.Notices, Overage: r.Overage,
	}
	if r.Scope.valid() {
		d.Scope = r.Scope.String()
	}
	for _, a := range r.Key {
		d.Key = append(d.Key, string(a))
	}
	if r.Algorithm != 0 {
		d.Algorithm = r.Algorithm.String()
	}
	if r.Intent != 0 {
		d.Intent = r.Intent.String()
	}
	if r.FailMode != 0 {
		d.FailMode = r.FailMode.String()
	}
	if r.Period != 0 {
		d.Period = formatDuration(r.Period)
	}
	if c := r.Cycle; c != nil && c.Unit != 0 {
		d.Period = c.Unit.String()
		if c.AnchorDay != 0 || c.TimeZone != "" {
			d.Cycle = anchorDoc(c.Anchor)
		}
	}
	if m := &r.Match; len(m.Routes)+len(m.Tenants)+len(m.Plans)+len(m.Descriptors) > 0 || m.Domain != "" {
		d.Match = &matchDoc{Routes: m.Routes, Tenants: m.Tenants, Plans: m.Plans, Domain: m.Domain}
		for _, e := range m.Descriptors {
			d.Match.Descriptors = append(d.Match.Descriptors, descriptorDoc(e))
		}
	}
	if len(r.Plans) > 0 {
		d.Plans = make(map[string]planDoc, len(r.Plans))
		for name, p := range r.Plans {
			d.Plans[name] = planDoc{Limit: p.Limit, Weight: p.Weight, Rank: p.Rank, Cycle: anchorDoc(p.Cycle)}
		}
	}
	if len(r.Tenants) > 0 {
		d.Tenants = make(map[string]tenantDoc, len(r.Tenants))
		for name, o := range r.Tenants {
			d.Tenants[name] = tenantDoc{Limit: o.Limit, Weight: o.Weight, Cycle: anchorDoc(o.Cycle)}
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
