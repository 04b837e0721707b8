package state

import (
	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/ledger"
)

// Export to a ledger sink. The leader writes final lines to the sink in
// the ledger's order, each batch in one transaction that also moves the
// sink's stored position; then it proposes an ExportedCommand with that
// position, and every member drops the lines up to it. What a member holds
// is then the open windows and the final lines not yet exported, however
// long the retention.
//
// Only final windows older than every open window are exported: windows
// can become final out of order (a window whose reporters all answered
// becomes final while an older one waits on a silent agent), and the
// position is one key in the ledger's order, so a line below it must never
// appear later. Final windows never change (late usage and late grants are
// carried into the window open when they arrive), so a line, once below
// the position, is never written again.

// PositionFromProto reads an export position (ledger.Position) from its
// log and snapshot form; nil is unset. With PositionProto, the one
// conversion between the two.
func PositionFromProto(m *fsmpb.ExportPosition) ledger.Position {
	if m == nil {
		return ledger.Position{}
	}
	return ledger.Position{
		Set:   true,
		Last:  ledger.Key{Window: m.GetWindowUnix(), Tenant: m.GetTenant(), Rule: m.GetRule(), Region: m.GetRegion()},
		Lines: m.GetLines(), Batches: m.GetBatches(),
	}
}

// PositionProto is an export position's log and snapshot form; nil when
// unset.
func PositionProto(p ledger.Position) *fsmpb.ExportPosition {
	if !p.Set {
		return nil
	}
	return &fsmpb.ExportPosition{
		WindowUnix: p.Last.Window, Tenant: p.Last.Tenant, Rule: p.Last.Rule, Region: p.Last.Region,
		Lines: p.Lines, Batches: p.Batches,
	}
}

// Exported is how far a sink has exported the ledger: every final line up
// to and including its Last, when Set.
func (s *State) Exported() ledger.Position { return s.export }

// RetentionDropped counts the lines retention deleted: with a sink, lines
// that were never exported.
func (s *State) RetentionDropped() uint64 { return s.retentionDropped }

// applyExported drops the final lines up to the position's key and keeps
// the position. A position not past the one kept is a repeat (a retried
// proposal, or an older leader's) and changes nothing.
func (s *State) applyExported(cmd *fsmpb.ExportedCommand) {
	pos := PositionFromProto(cmd.GetPosition())
	if !pos.After(s.export) {
		return
	}
	s.dropFinalLines(func(k ledger.Key) bool { return ledger.CompareKeys(k, pos.Last) <= 0 })
	s.export = pos
}

// exportFrontier is the oldest open window, if any: lines from it on wait.
func (s *State) exportFrontier() (frontier int64, any bool) {
	s.open.Ascend(func(it openItem) bool {
		frontier, any = it.window, true
		return false
	})
	return frontier, any
}

// ExportPage returns up to limit lines to export next, in the ledger's
// order: the final lines after the position, in windows older than every
// open window. It costs O(log n + limit).
func (s *State) ExportPage(limit int) []ledger.Line { return s.ExportPageAfter(s.export, limit) }

// ExportPageAfter is ExportPage after a position the sink is known to
// hold that the state has not applied yet (a batch committed in the sink
// whose ExportedCommand is still in flight): the lines up to it are still
// here, and are skipped.
func (s *State) ExportPageAfter(after ledger.Position, limit int) []ledger.Line {
	frontier, bounded := s.exportFrontier()
	var out []ledger.Line
	visit := func(it lineItem) bool {
		if len(out) == limit || bounded && it.key.Window >= frontier {
			return false
		}
		if after.Set && ledger.CompareKeys(it.key, after.Last) <= 0 {
			return true // the position's own line, when it is still here
		}
		if !s.final.Has(it.key.Window) {
			return false
		}
		out = append(out, s.line(it))
		return true
	}
	if after.Set {
		s.ledger.AscendGreaterOrEqual(lineItem{key: after.Last}, visit)
	} else {
		s.ledger.Ascend(visit)
	}
	return out
}

// ExportBacklog counts the lines waiting for export (the final lines: a
// sink has taken the others) and the oldest window among them; ok is false
// when none wait. It costs O(log n) and a walk past the open lines older
// than the oldest final one, which windows becoming final in order leave
// none of.
func (s *State) ExportBacklog() (lines int, oldest int64, ok bool) {
	if s.finalLines == 0 {
		return 0, 0, false
	}
	s.ledger.Ascend(func(it lineItem) bool {
		if s.final.Has(it.key.Window) {
			oldest, ok = it.key.Window, true
			return false
		}
		return true
	})
	return s.finalLines, oldest, ok
}

// linesIn counts the lines of one window.
func (s *State) linesIn(window int64) int {
	n := 0
	s.ledger.AscendGreaterOrEqual(lineItem{key: ledger.Key{Window: window}}, func(it lineItem) bool {
		if it.key.Window != window {
			return false
		}
		n++
		return true
	})
	return n
}

// countFinalLines sets finalLines from the ledger, for a state read from a
// snapshot.
func (s *State) countFinalLines() {
	s.finalLines = 0
	s.ledger.Ascend(func(it lineItem) bool {
		if s.final.Has(it.key.Window) {
			s.finalLines++
		}
		return true
	})
}
