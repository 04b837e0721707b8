package lease

import "time"

// Observation is what one node saw for one key over one reporting
// interval: the cost it admitted and the cost it denied (attempted is both).
type Observation struct {
	Admitted float64
	Denied   float64
	Interval time.Duration
}

// Estimator turns each interval's observation into a smoothed demand, in
// units per rule period. It tells noise from a move: a change within Band
// of the previous estimate (25% by default) is noise and is averaged away,
// Alpha × attempted + (1 − Alpha) × previous; a larger change means the
// demand has moved, and the estimate moves with it at once. It also reads
// the two kinds of interval differently:
//
//   - A node that denied nothing was not held back by its lease, so what it
//     attempted is all it wanted: its estimate is capped at (1 + Band) ×
//     attempted. A node whose traffic moved elsewhere gives its share back
//     in the very next round.
//   - A node that denied requests wanted at least what it attempted: its
//     estimate is never below that.
//
// So one noisy interval moves an allocation by at most Alpha of its noise,
// while a shift of demand from one node to another is followed in one
// round, not through the slow tail of an average.
type Estimator struct {
	Alpha float64 // weight of the newest interval inside the noise band, in (0, 1]
	Band  float64 // relative change from the previous estimate that counts as noise
}

// DefaultEstimator returns the estimator the coordinator uses unless
// configured otherwise: Alpha 0.5, Band 0.25.
func DefaultEstimator() Estimator { return Estimator{Alpha: 0.5, Band: 0.25} }

// Next returns the demand after obs, given the previous estimate (zero for a
// node never seen) and the rule's period.
func (e Estimator) Next(prev float64, obs Observation, period time.Duration) float64 {
	if obs.Interval <= 0 || period <= 0 {
		return prev
	}
	scale := float64(period) / float64(obs.Interval)
	attempted := (max(obs.Admitted, 0) + max(obs.Denied, 0)) * scale
	next := e.Alpha*attempted + (1-e.Alpha)*prev
	if attempted > prev*(1+e.Band) || attempted < prev*(1-e.Band) {
		next = attempted // demand has moved
	}
	if obs.Denied > 0 {
		return max(next, attempted)
	}
	return min(next, attempted*(1+e.Band))
}
