package allotpb

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Limits of the wire protocol. A coordinator refuses a report that breaks
// one, naming the field; an agent applies the same limits before sending,
// so that no request a gateway admits can produce a report the
// coordinators refuse (see ValidateReport).
const (
	// MaxNameLen bounds node, region, rule, tenant and plan names.
	MaxNameLen = 256
	// MaxGroupLen bounds a shard group's ID (ValidGroupID).
	MaxGroupLen = 64
	// MaxKeyLen bounds an encoded key. Agents hash attributes longer than
	// 128 bytes, so their keys stay far below it.
	MaxKeyLen = 1024
	// MaxCost is the largest cost of one request: Envoy's hits_addend is a
	// uint32 too. With it, a per-interval counter cannot wrap: 2^31
	// requests of the largest cost fit in an int64, and no node decides
	// two billion requests an interval.
	MaxCost = 1<<32 - 1
	// MaxCount bounds one usage line's admitted or denied units: 2^53,
	// beyond which float64 demand estimates lose units. A line covers one
	// tenant, rule and billing window on one node.
	MaxCount = 1 << 53
	// MaxPriority is the largest request priority (a uint8 on the agent).
	MaxPriority = 255
	// MaxViolations is how many violations a refusal lists at most.
	MaxViolations = 100
	// MaxPeriod bounds a key's own period (KeyDemand.period_nano), as the
	// algorithms bound a rule's: a century.
	MaxPeriod = 100 * 365 * 24 * time.Hour
)

// Violation is one field of a report that breaks the protocol's limits.
type Violation struct {
	// Field names it, e.g. "usage.counts[3].tenant".
	Field string
	// Description says what the limit is and what was sent.
	Description string
	// Count is the index of the offending usage count, or -1.
	Count int
	// Demand is the index of the offending key demand, or -1.
	Demand int
}

// ReportLimits are a coordinator's bounds on one report.
type ReportLimits struct {
	// MaxKeys bounds the demand entries and, separately, the usage counts.
	MaxKeys int
	// MinWindowUnix and MaxWindowUnix bound a usage count's billing
	// window, in Unix seconds; zero leaves that side unchecked.
	MinWindowUnix, MaxWindowUnix int64
	// NowUnixNano is the coordinator's clock. With MaxSkew, a report's
	// sent_unix_nano must be within MaxSkew of it, and a batch's
	// cut_unix_nano no later than MaxSkew after it: a cut in the future
	// would close billing windows early.
	NowUnixNano int64
	MaxSkew     time.Duration
	// MaxUnitsPerSecond, when positive, bounds the units one node may
	// report: a key's admitted and denied demand over the report's
	// interval (at least a second), and a usage count's over its billing
	// window (BillingWindow).
	MaxUnitsPerSecond float64
	BillingWindow     time.Duration
}

// WindowBounds returns the billing windows a coordinator at now accepts:
// from past (a retention, or how long an agent may keep usage while cut
// off) before now to ahead after it (clock skew).
func WindowBounds(now time.Time, past, ahead time.Duration) (minUnix, maxUnix int64) {
	return now.Add(-past).Unix(), now.Add(ahead).Unix()
}

// ValidateReport returns what in req breaks the limits, at most
// MaxViolations of them, or nil. A violation of the report itself (node,
// incarnation, sizes) has Count and Demand -1; one of an entry names it,
// so that an agent can drop that entry and send the rest.
func ValidateReport(req *ReportRequest, lim ReportLimits) []Violation {
	var out []Violation
	add := func(field, desc string, count, demand int) bool {
		out = append(out, Violation{Field: field, Description: desc, Count: count, Demand: demand})
		return len(out) < MaxViolations
	}
	whole := func(field, desc string) bool { return add(field, desc, -1, -1) }
	if m := checkName("node", req.GetNode(), true); m != "" {
		_, desc, _ := cut(m)
		whole("node", desc)
	}
	if req.GetIncarnation() == 0 {
		whole("incarnation", "must be a non-zero random number drawn when the agent starts")
	}
	if iv := req.GetIntervalNano(); iv < 0 || iv > int64(time.Hour) {
		whole("interval_nano", fmt.Sprintf("must be between 0 and one hour, got %d", iv))
	}
	if m := checkName("region", req.GetRegion(), false); m != "" {
		_, desc, _ := cut(m)
		whole("region", desc)
	}
	// A parent keeps what it hears of each group by its name: unchecked,
	// a region's credential could grow its memory by naming new ones.
	if err := ValidGroupID(req.GetGroup(), false); err != nil {
		whole("group", err.Error())
	}
	if err := ValidGroupID(req.GetReporterGroup(), false); err != nil {
		whole("reporter_group", err.Error())
	}
	if sent := req.GetSentUnixNano(); lim.MaxSkew > 0 && sent != 0 && math.Abs(float64(sent-lim.NowUnixNano)) > float64(lim.MaxSkew) {
		whole("sent_unix_nano", fmt.Sprintf("the agent's clock is %v from the coordinator's; at most %v is accepted (check NTP on the gateway)",
			time.Duration(sent-lim.NowUnixNano).Round(time.Second), lim.MaxSkew))
	}
	if cut := req.GetUsage().GetCutUnixNano(); lim.MaxSkew > 0 && cut > lim.NowUnixNano+int64(lim.MaxSkew) {
		whole("usage.cut_unix_nano", fmt.Sprintf("is %v ahead of the coordinator's clock; at most %v is accepted",
			time.Duration(cut-lim.NowUnixNano).Round(time.Second), lim.MaxSkew))
	}
	if lim.MaxKeys > 0 && len(req.GetDemand()) > lim.MaxKeys {
		whole("demand", fmt.Sprintf("has %d keys; at most %d per report", len(req.GetDemand()), lim.MaxKeys))
	}
	if lim.MaxKeys > 0 && len(req.GetUsage().GetCounts()) > lim.MaxKeys {
		whole("usage.counts", fmt.Sprintf("has %d counts; at most %d per report", len(req.GetUsage().GetCounts()), lim.MaxKeys))
	}
	if len(out) > 0 {
		return out // entries are not worth reading in a report refused whole
	}
	demandCap := math.Inf(1)
	if lim.MaxUnitsPerSecond > 0 {
		demandCap = lim.MaxUnitsPerSecond * max(time.Duration(req.GetIntervalNano()), time.Second).Seconds()
	}
	for i, d := range req.GetDemand() {
		msg := checkDemand(d)
		if msg == "" && d.GetAdmitted()+d.GetDenied() > demandCap {
			msg = fmt.Sprintf("admitted: admitted and denied add up to %v units in one report interval; this coordinator accepts at most %v per node per second",
				d.GetAdmitted()+d.GetDenied(), lim.MaxUnitsPerSecond)
		}
		if msg != "" {
			f, desc, _ := cut(msg)
			if !add("demand["+strconv.Itoa(i)+"]."+f, desc, -1, i) {
				return out
			}
		}
	}
	for i, c := range req.GetUsage().GetCounts() {
		if msg := checkCount(c, lim); msg != "" {
			f, desc, _ := cut(msg)
			if !add("usage.counts["+strconv.Itoa(i)+"]."+f, desc, i, -1) {
				return out
			}
		}
	}
	return out
}

// ValidGroupID checks a shard group's ID: 1 to MaxGroupLen bytes of
// letters, digits, '-', '_' and '.'; "" too unless required (a report
// naming no group). The error describes what is wrong without repeating
// an ID too long to show.
func ValidGroupID(id string, required bool) error {
	if id == "" && !required {
		return nil
	}
	if id == "" || len(id) > MaxGroupLen {
		return fmt.Errorf("a group ID must be 1 to %d bytes, got %d", MaxGroupLen, len(id))
	}
	if strings.IndexFunc(id, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
	}) >= 0 {
		return fmt.Errorf("group ID %q may hold only letters, digits, '-', '_' and '.'", id)
	}
	return nil
}

// cut splits "field: description".
func cut(msg string) (field, desc string, ok bool) {
	for i := 0; i+1 < len(msg); i++ {
		if msg[i] == ':' && msg[i+1] == ' ' {
			return msg[:i], msg[i+2:], true
		}
	}
	return "", msg, false
}

func checkName(field, v string, required bool) string {
	if !utf8.ValidString(v) {
		return field + ": must be valid UTF-8 (protobuf strings are)"
	}
	if (required && v == "") || len(v) > MaxNameLen {
		lo := 0
		if required {
			lo = 1
		}
		return fmt.Sprintf("%s: must be %d–%d bytes, got %d", field, lo, MaxNameLen, len(v))
	}
	return ""
}

func checkDemand(d *KeyDemand) string {
	if m := checkName("rule", d.GetRule(), true); m != "" {
		return m
	}
	if len(d.GetKey()) > MaxKeyLen {
		return fmt.Sprintf("key: must be at most %d bytes, got %d", MaxKeyLen, len(d.GetKey()))
	}
	if !utf8.ValidString(d.GetKey()) {
		return "key: must be valid UTF-8 (protobuf strings are)"
	}
	if m := checkName("tenant", d.GetTenant(), false); m != "" {
		return m
	}
	if m := checkName("plan", d.GetPlan(), false); m != "" {
		return m
	}
	if d.GetPriority() > MaxPriority {
		return fmt.Sprintf("priority: must be 0–%d, got %d", MaxPriority, d.GetPriority())
	}
	for _, v := range [...]struct {
		name  string
		value float64
	}{{"admitted", d.GetAdmitted()}, {"denied", d.GetDenied()}, {"held", d.GetHeld()}, {"committed", d.GetCommitted()}, {"weight", d.GetWeight()}} {
		if !(v.value >= 0) || math.IsInf(v.value, 0) || v.value > MaxCount {
			return fmt.Sprintf("%s: must be a finite number from 0 to 2^53, got %v", v.name, v.value)
		}
	}
	if iv := d.GetIntervalNano(); iv < 0 || iv > int64(time.Hour) {
		return fmt.Sprintf("interval_nano: must be between 0 and one hour, got %d", iv)
	}
	if m := checkKeyLimit(d.GetLimit(), d.GetPeriodNano()); m != "" {
		return m
	}
	if b := d.GetBurst(); b < 0 || b > MaxCount || b != 0 && d.GetLimit() == 0 {
		return fmt.Sprintf("burst: must be from 0 to 2^53, and only with limit set, got %d", b)
	}
	return ""
}

// checkKeyLimit checks a key's own limit: none (both 0), or a positive
// limit of at most MaxCount (the coordinators divide it in float64) per a
// positive period of at most MaxPeriod, the bounds a rule's limit and
// period have. Whether the rule's algorithm takes it (a sliding window
// counts at most 2^32-1 a window) only the coordinator knowing the rule
// can tell: it grants such a key nothing.
func checkKeyLimit(limit, period int64) string {
	if limit == 0 && period == 0 {
		return ""
	}
	if limit <= 0 || limit > MaxCount {
		return fmt.Sprintf("limit: must be from 1 to 2^53 with period_nano set, got %d", limit)
	}
	if period <= 0 || period > int64(MaxPeriod) {
		return fmt.Sprintf("period_nano: must be from 1 to %d (a century) with limit set, got %d", int64(MaxPeriod), period)
	}
	return ""
}

func checkCount(c *UsageCount, lim ReportLimits) string {
	if m := checkName("rule", c.GetRule(), true); m != "" {
		return m
	}
	if m := checkName("tenant", c.GetTenant(), false); m != "" {
		return m
	}
	w := c.GetWindowUnix()
	if w < 0 || (lim.MinWindowUnix != 0 && w < lim.MinWindowUnix) || (lim.MaxWindowUnix != 0 && w > lim.MaxWindowUnix) {
		return fmt.Sprintf("window_unix: %d is outside the windows this coordinator accepts (%d to %d)", w, lim.MinWindowUnix, lim.MaxWindowUnix)
	}
	if c.GetAdmitted() > MaxCount {
		return fmt.Sprintf("admitted: must be at most 2^53, got %d", c.GetAdmitted())
	}
	if c.GetDenied() > MaxCount {
		return fmt.Sprintf("denied: must be at most 2^53, got %d", c.GetDenied())
	}
	if lim.MaxUnitsPerSecond > 0 && lim.BillingWindow > 0 {
		if n, most := float64(c.GetAdmitted())+float64(c.GetDenied()), lim.MaxUnitsPerSecond*lim.BillingWindow.Seconds(); n > most {
			return fmt.Sprintf("admitted: admitted and denied add up to %v units in one billing window; this coordinator accepts at most %v per node per second", n, lim.MaxUnitsPerSecond)
		}
	}
	return ""
}

// BoundName returns a name that fits the protocol: the name itself when
// it is valid UTF-8 of at most MaxNameLen bytes; otherwise its first bytes
// (cut on a rune boundary, invalid bytes replaced by U+FFFD), "#", and the
// hex SHA-256 of the whole name, 64 characters. Every agent bounds a name
// the same way, so usage of one such tenant from many nodes lands on one
// ledger line, and two names sharing a prefix stay apart.
func BoundName(s string) string {
	if len(s) <= MaxNameLen && utf8.ValidString(s) {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	keep := MaxNameLen - 1 - 2*len(sum)
	prefix := strings.ToValidUTF8(s[:min(len(s), keep)], "\uFFFD")
	for len(prefix) > keep {
		_, size := utf8.DecodeLastRuneInString(prefix)
		prefix = prefix[:len(prefix)-size]
	}
	return prefix + "#" + hex.EncodeToString(sum[:])
}

// SaturatingAdd adds two counts, stopping at the largest uint64 instead
// of wrapping.
func SaturatingAdd(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint64
}
