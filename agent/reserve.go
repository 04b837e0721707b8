package agent

import (
	"crypto/rand"
	"errors"
	"fmt"
	bits64 "math/bits"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/allot-io/allot/rules"
)

// Reserving, then settling, charges a cost known only after the response:
// the tokens an LLM produced, the bytes a download sent. Reserve decides a
// request at an estimate of its cost (Request.Cost) and holds what it
// spent; Settle gives the actual cost, and the difference is charged to,
// or given back to, the same keys of the same rules. A rate algorithm may
// go into debt and refuse the key's next requests until time repays it; a
// window algorithm charges the window the request was admitted in. A
// global rule's shared total is charged the difference only as far as it
// has room (capacity rules tolerate overshoot, and a debt there would
// refuse every tenant).
//
// The ledger bills the settled cost, once, in the billing window current
// when the request is settled; a reservation not settled within
// Config.ReservationTTL is settled at its estimate. A reservation lives in
// the agent's memory: a process killed before settling loses it, as it
// loses the counts of its last interval.

// Sentinel errors of Settle.
var (
	// ErrNoReservation: the reservation is unknown to this agent — never
	// made here, or already settled at its estimate when its TTL ran out.
	ErrNoReservation = errors.New("agent: no such reservation")
	// ErrSettled: the reservation was settled already.
	ErrSettled = errors.New("agent: reservation already settled")
)

// Defaults of Config.ReservationTTL and Config.MaxReservations.
const (
	DefaultReservationTTL  = 10 * time.Minute
	DefaultMaxReservations = 100_000
)

// Reservation names a reserved request until it is settled. Its zero value
// is no reservation: a request refused, or decided without rules.
type Reservation struct{ id uint64 }

// ID is the reservation's number, for clients that settle it later in
// another call (the sidecar's /v1/settle); 0 for no reservation. It is 64
// bits from a cryptographically strong generator, so that a caller that
// knows its own reservations' numbers learns nothing of another caller's:
// settling one it was not given takes guessing a 64-bit number.
func (r Reservation) ID() uint64 { return r.id }

// ReservationFromID is the reservation an ID names.
func ReservationFromID(id uint64) Reservation { return Reservation{id} }

// reservation is a reserved request and what it spent.
type reservation struct {
	id       uint64
	req      Request
	c        *compiled // the rule set that decided it
	passed   ruleBits  // the rules that admitted it, in c
	at       instants  // when it was admitted
	estimate int64
	deadline int64 // ns, the agent's local clock
	held     bool  // set by Check: admitted, to be billed at settling
	// The neighbours in the list of open reservations, by deadline.
	older, newer *reservation
}

// hold records, for Check, what an admitted request with a reservation
// spent; it is billed when settled.
func (r *reservation) hold(c *compiled, passed *ruleBits, now instants, cost int64) {
	r.c, r.passed, r.at, r.estimate, r.held = c, *passed, now, cost, true
}

// reservations are an agent's open reservations, by ID and by deadline,
// and the recently settled ones (to tell "settled already" from
// "unknown").
type reservations struct {
	mu   sync.Mutex
	open map[uint64]*reservation
	// oldest and newest end the list of the open reservations by deadline
	// (TTLs are all alike: by age). A reservation leaves it when settled,
	// not when its deadline comes, so that one left open for long does
	// not hold every later one, and its rule set, until then: what the
	// agent keeps is bounded by the open reservations.
	oldest, newest *reservation
	settled        [4096]uint64
	next           int
	done           map[uint64]struct{}
	// ids draws the reservations' numbers. A number derived from a
	// counter, even masked, would give one caller of a shared sidecar
	// the numbers of its neighbours' reservations (consecutive counts
	// differ in their low bits), and /v1/settle would settle them: only
	// a generator whose outputs say nothing of one another makes a
	// number a capability. ChaCha8, seeded from crypto/rand, is one, and
	// costs no system call per reservation.
	ids *mrand.ChaCha8
}

func (rv *reservations) init() {
	var seed [32]byte
	_, _ = rand.Read(seed[:]) // it cannot fail: it ends the program first
	rv.ids = mrand.NewChaCha8(seed)
	rv.open = map[uint64]*reservation{}
	rv.done = map[uint64]struct{}{}
}

// newID draws a number for a new reservation: never 0 (no reservation),
// nor the number of one open or recently settled, which a collision of
// random numbers would otherwise confuse with it. rv.mu is held.
func (rv *reservations) newID() uint64 {
	for {
		id := rv.ids.Uint64()
		if _, open := rv.open[id]; open {
			continue
		}
		if _, settled := rv.done[id]; settled || id == 0 {
			continue
		}
		return id
	}
}

// Reserve decides req as Check does, at its Cost (the estimate), and
// holds what it spent until Settle gives the actual cost. The request is
// billed when settled, not now. The Reservation is the zero one when the
// request was refused or decided without rules; a peek reserves nothing.
// At most Config.MaxReservations are open: past that the oldest is
// settled at its estimate.
func (a *Agent) Reserve(req Request) (Decision, Reservation) {
	if req.Peek {
		return a.Check(req), Reservation{}
	}
	r := &reservation{}
	req.res = r
	d := a.Check(req)
	if !d.Allowed || !r.held {
		return d, Reservation{}
	}
	r.req = req
	r.req.res = nil
	now := a.clock.local()
	r.deadline = now + int64(a.cfg.ReservationTTL)
	rv := &a.reserved
	rv.mu.Lock()
	r.id = rv.newID()
	rv.add(r)
	due := a.dueLocked(now)
	rv.mu.Unlock()
	for _, x := range due {
		a.settle(x, x.estimate)
	}
	return d, Reservation{r.id}
}

// Settled is what Settle did.
type Settled struct {
	// Estimate and Actual are the reserved and the settled cost; Charged
	// is their difference, charged (above 0) or given back (below).
	Estimate, Actual, Charged int64
}

// Settle settles a reservation at the actual cost, from 0 (nothing billed:
// the request failed) to MaxCost: the difference from the estimate is
// charged to, or given back to, the keys the request was admitted under,
// and the actual cost is billed. A cost out of range is an error wrapping
// ErrInvalidRequest and leaves the reservation open; an unknown
// reservation is ErrNoReservation, one settled already ErrSettled.
func (a *Agent) Settle(res Reservation, actual int64) (Settled, error) {
	if actual < 0 || actual > MaxCost {
		return Settled{}, fmt.Errorf("%w: cost: must be from 0 to %d, got %d", ErrInvalidRequest, int64(MaxCost), actual)
	}
	rv := &a.reserved
	rv.mu.Lock()
	r := rv.open[res.id]
	if r != nil {
		rv.take(r)
	}
	_, settled := rv.done[res.id]
	rv.mu.Unlock()
	switch {
	case r != nil:
	case settled && res.id != 0:
		return Settled{}, fmt.Errorf("%w: reservation %d", ErrSettled, res.id)
	default:
		return Settled{}, fmt.Errorf("%w: reservation %d (never made here, or settled at its estimate when its TTL of %v ran out)", ErrNoReservation, res.id, a.cfg.ReservationTTL)
	}
	a.settle(r, actual)
	return Settled{Estimate: r.estimate, Actual: actual, Charged: actual - r.estimate}, nil
}

// add opens r, the newest reservation. rv.mu is held.
func (rv *reservations) add(r *reservation) {
	rv.open[r.id] = r
	r.older = rv.newest
	if rv.newest != nil {
		rv.newest.newer = r
	} else {
		rv.oldest = r
	}
	rv.newest = r
}

// take closes r, an open reservation, to be settled: out of the open ones
// and their list, and remembered as settled. rv.mu is held.
func (rv *reservations) take(r *reservation) {
	delete(rv.open, r.id)
	if r.older != nil {
		r.older.newer = r.newer
	} else {
		rv.oldest = r.newer
	}
	if r.newer != nil {
		r.newer.older = r.older
	} else {
		rv.newest = r.older
	}
	r.older, r.newer = nil, nil
	rv.remember(r.id)
}

// remember records id as settled, forgetting the oldest so recorded.
func (rv *reservations) remember(id uint64) {
	if old := rv.settled[rv.next]; old != 0 {
		delete(rv.done, old)
	}
	rv.settled[rv.next] = id
	rv.done[id] = struct{}{}
	rv.next = (rv.next + 1) % len(rv.settled)
}

// dueLocked takes out the reservations past their deadline at now (local
// ns), and the oldest beyond MaxReservations, to be settled at their
// estimates. rv.mu is held.
func (a *Agent) dueLocked(now int64) []*reservation {
	rv := &a.reserved
	var due []*reservation
	for r := rv.oldest; r != nil && (r.deadline <= now || len(rv.open) > a.cfg.MaxReservations); r = rv.oldest {
		rv.take(r)
		due = append(due, r)
	}
	return due
}

// settleDue settles at their estimates the reservations past their
// deadline: the reporter calls it every interval, and Close with all set
// (every open reservation), so that the last report bills them.
func (a *Agent) settleDue(all bool) {
	rv := &a.reserved
	rv.mu.Lock()
	now := a.clock.local()
	if all {
		now = 1<<63 - 1
	}
	due := a.dueLocked(now)
	rv.mu.Unlock()
	for _, r := range due {
		a.settle(r, r.estimate)
	}
}

// settle charges or gives back the difference between r's estimate and
// actual under the rules that admitted it, and bills actual under those of
// them the current rule set still has.
func (a *Agent) settle(r *reservation, actual int64) {
	local := a.clock.local()
	now := newInstants(local, local+a.clock.offset.Load())
	var rh reqHashes
	delta := actual - r.estimate
	c := r.c
	var names []string
	for w, bits := range r.passed[:words(len(c.rules))] {
		for bits != 0 {
			j := w<<6 | bits64.TrailingZeros64(bits)
			bits &= bits - 1
			rs := c.rules[j]
			switch {
			case delta > 0:
				rs.charge(a, &r.req, &rh, rs.at(&now), rs.at(&r.at), delta)
			case delta < 0:
				rs.decide(a, &r.req, &rh, rs.at(&now), -delta, opGiveBack)
			}
			names = append(names, rs.rule.Name)
		}
	}
	if actual == 0 {
		return
	}
	cur := a.rules.Load()
	bits := r.passed
	if cur != c {
		// The rules changed since: bill the rules still enforced.
		bits = ruleBits{}
		for _, name := range names {
			for j, rs := range cur.rules {
				if rs.rule.Name == name {
					bits.set(j)
				}
			}
		}
	}
	th := rh.get(a, &r.req, rules.AttrTenant)
	cur.countPassed(cur.usage.get(th, r.req.Tenant, r.req.Plan), th, &r.req, &bits, actual)
}

// charge spends cost under this rule for a request admitted at at, whatever
// the limit: a reservation settled above its estimate.
func (rs *ruleState) charge(a *Agent, req *Request, rh *reqHashes, now, at time.Time, cost int64) {
	st := rs.store(req)
	if rs.fair != nil {
		// A shared total: charged as far as it has room.
		rs.fair.decide(a, rs, st, req, rh, now, cost, opSpend)
		return
	}
	h := rs.keyHash(a, rh, req)
	if hk := (*rs.hot.Load())[h]; hk != nil && hk.ready.Load() {
		hk.lim.ChargeAt(now, at, cost)
		hk.admitted.Add(cost)
		return
	}
	st.keyed.ChargeHashAt(h, now, at, cost)
}

// OpenReservations is how many reservations are open.
func (a *Agent) OpenReservations() int {
	a.reserved.mu.Lock()
	defer a.reserved.mu.Unlock()
	return len(a.reserved.open)
}
