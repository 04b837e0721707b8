package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
	"google.golang.org/protobuf/encoding/protojson"
)

// rulesCacheFormat names the rules cache's layout, checked when it is read.
const rulesCacheFormat = "allot-rules-cache/1"

// maxRulesCacheSize bounds what New reads of a rules cache: the rule
// file's own bound, in the wire form's larger JSON.
const maxRulesCacheSize = 4 * rules.MaxFileSize

// ErrRulesCache is wrapped by every error reading a rules cache.
var ErrRulesCache = errors.New("agent: rules cache")

// rulesCache is the file Config.RulesCacheFile names: the cluster's rule
// set as the coordinators last sent it (their wire form, as JSON), and the
// fleet's size then, so that a node restarted while they are out of reach
// enforces the same shares a running node falls back to.
type rulesCache struct {
	Format  string          `json:"format"`
	Node    string          `json:"node"`
	Region  string          `json:"region"`
	Nodes   int64           `json:"nodes"`
	Written time.Time       `json:"written"`
	Rules   json.RawMessage `json:"rules"`
}

// cachedRules is a rules cache read back.
type cachedRules struct {
	set      *allotpb.RuleSet
	nodes    int64
	written  time.Time
	fileNode string
}

// readRulesCache reads a rules cache. A missing file is fs.ErrNotExist,
// unwrapped by errors.Is; anything else wrong names the file and what.
func readRulesCache(path string) (*cachedRules, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrRulesCache, path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxRulesCacheSize+1))
	if err != nil {
		return nil, fmt.Errorf("%w %s: reading: %w", ErrRulesCache, path, err)
	}
	if len(data) > maxRulesCacheSize {
		return nil, fmt.Errorf("%w %s: over %d bytes", ErrRulesCache, path, maxRulesCacheSize)
	}
	var doc rulesCache
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrRulesCache, path, err)
	}
	if doc.Format != rulesCacheFormat {
		return nil, fmt.Errorf("%w %s: format %q, want %q (written by another version?)", ErrRulesCache, path, doc.Format, rulesCacheFormat)
	}
	if doc.Nodes < 0 {
		return nil, fmt.Errorf("%w %s: nodes: must not be negative, got %d", ErrRulesCache, path, doc.Nodes)
	}
	set := &allotpb.RuleSet{}
	if err := protojson.Unmarshal(doc.Rules, set); err != nil {
		return nil, fmt.Errorf("%w %s: rules: %w", ErrRulesCache, path, err)
	}
	return &cachedRules{set: set, nodes: max(doc.Nodes, 1), written: doc.Written, fileNode: doc.Node}, nil
}

// writeRulesCache replaces the rules cache at path atomically: a reader
// (the next start) sees the old file or the new one, whole, even across
// a crash or a power cut.
func writeRulesCache(path string, doc *rulesCache) error {
	data, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return fmt.Errorf("agent: encoding the rules cache: %w", err)
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".*.tmp")
	if err != nil {
		return fmt.Errorf("agent: writing the rules cache %s: %w", path, err)
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		return fmt.Errorf("agent: writing the rules cache %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("agent: writing the rules cache %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("agent: writing the rules cache %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("agent: writing the rules cache %s: %w", path, err)
	}
	done = true
	// The rename is durable once the directory is.
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// newRulesCache is the cache document for the cluster's set p.
func (a *Agent) newRulesCache(p *allotpb.RuleSet, nodes int64, now time.Time) (*rulesCache, error) {
	raw, err := protojson.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("agent: encoding the rules cache: %w", err)
	}
	return &rulesCache{Format: rulesCacheFormat, Node: a.cfg.NodeID, Region: a.cfg.Region, Nodes: nodes, Written: now.UTC(), Rules: raw}, nil
}

// loadRulesCache enforces the rules cache, if there is a usable one, until
// the cluster's rules arrive. It reports whether it did; what is wrong with
// a cache that exists is logged at ERROR, and the start-up policy applies.
func (a *Agent) loadRulesCache() bool {
	path := a.cfg.RulesCacheFile
	c, err := readRulesCache(path)
	if errors.Is(err, os.ErrNotExist) {
		a.log.Info("no rules cache yet: it is written when the cluster's rules arrive", "file", path)
		return false
	}
	if err != nil {
		a.log.Error("the rules cache cannot be read; it is replaced when the cluster's rules arrive", "until_rules", a.cfg.UntilRules.String(), "error", err)
		return false
	}
	set, problems, err := setFromProto(c.set)
	if err != nil {
		a.log.Error("the rules cache holds rules this agent cannot enforce; it is replaced when the cluster's rules arrive", "file", path, "until_rules", a.cfg.UntilRules.String(), "error", err)
		return false
	}
	a.nodes.Store(c.nodes)
	_ = a.install(set, problems, false, sourceCache) // never fails when not strict
	a.log.Info("enforcing the cached rules until the cluster's arrive", "file", path, "version", set.Version(), "rules", set.Len(),
		"nodes", c.nodes, "written", c.written.Format(time.RFC3339), "by", c.fileNode)
	return true
}
