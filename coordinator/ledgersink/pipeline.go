package ledgersink

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/allot-io/allot/ledger"
)

// errBeforeFailed is a pipelined batch given up because the batch before
// it failed: the stored position is then not the one this batch was read
// after (or, if that batch's commit went through and only its answer was
// lost, no one knows it is), so this batch writes nothing.
var errBeforeFailed = errors.New("ledgersink: the batch before this one failed")

// A Pipeline writes one cluster's consecutive batches, each in a
// transaction of its own as Write does, several at once. One transaction
// spends most of its time in PostgreSQL's backend (index upkeep) and the
// rest waiting on the client and on its commit's flush; with several in
// flight, the database works on one batch while the next is being sent
// and the one before is being flushed, and on more than one core.
//
// Exactly once holds as for Write, batch by batch: each transaction adds
// its lines and moves the position from the one its batch was read after
// (the position the batch before it leaves), as one compare-and-set. A
// batch copies its lines while the batch before it is still in flight
// and asks for the position's lock once that one holds it, so the
// commits come in batch order; if the batch before fails, the position
// is not the one this batch expects, and it writes nothing.
//
// A Pipeline is for one goroutine: Send and Wait are not safe for
// concurrent use. The database's connection pool (pool_max_conns in the
// DSN; by default 4, or the number of CPUs if more) bounds how many
// transactions run at once; batches sent beyond it wait for a connection
// in the order they were sent.
type Pipeline struct {
	sink    *Sink
	ctx     context.Context
	cluster string
	timeout time.Duration
	// tail is the position the last batch sent leaves if it commits.
	tail    ledger.Position
	flights []*flight
}

// Result is a batch a Pipeline wrote, or failed to write.
type Result struct {
	// Position is the stored position the batch's commit left.
	Position ledger.Position
	// Lines is the batch's size.
	Lines int
	// Took is how long its transaction took from Send to commit,
	// waiting for the batches before it included.
	Took time.Duration
	// Err is why it failed: Position is then the zero Position, and the
	// batch may or may not have been committed (an answer lost), as for
	// Write. Read Position before writing again.
	Err error
}

// flight is one batch in flight.
type flight struct {
	// began is fired once the transaction has a connection (or ended),
	// locked once it holds the position's lock (or ended).
	began, locked signal
	done          chan struct{}
	res           Result // set before done is closed
}

// signal is a channel closed once.
type signal struct {
	once sync.Once
	c    chan struct{}
}

func newSignal() signal { return signal{c: make(chan struct{})} }

func (s *signal) fire() { s.once.Do(func() { close(s.c) }) }

// Pipeline starts a pipeline of cluster's batches after from, the stored
// position as Position reads it. ctx bounds every batch's transaction,
// and timeout (if positive) each one, counted from its Send.
func (s *Sink) Pipeline(ctx context.Context, cluster string, from ledger.Position, timeout time.Duration) *Pipeline {
	return &Pipeline{sink: s, ctx: ctx, cluster: cluster, timeout: timeout, tail: from}
}

// Tail is the position the last batch sent leaves if it commits, and the
// one the next batch must be read after.
func (p *Pipeline) Tail() ledger.Position { return p.tail }

// Len is how many batches are in flight: sent, their result not yet
// returned by Wait.
func (p *Pipeline) Len() int { return len(p.flights) }

// Send starts writing lines, the batch after the last one sent (after
// Tail), and returns at once; Wait returns how it went. lines must not be
// changed until then. As for Write, lines must be non-empty, in strictly
// increasing ledger order and after Tail: otherwise Send returns an
// error wrapping ErrBadBatch and sends nothing.
func (p *Pipeline) Send(lines []ledger.Line) error {
	if err := validate(p.cluster, p.tail, lines); err != nil {
		return err
	}
	var before *flight
	if n := len(p.flights); n > 0 {
		before = p.flights[n-1]
	}
	f := &flight{began: newSignal(), locked: newSignal(), done: make(chan struct{})}
	from := p.tail
	p.tail = from.Advance(lines)
	p.flights = append(p.flights, f)
	start := time.Now()
	go func() {
		ctx, cancel := p.ctx, context.CancelFunc(func() {})
		if p.timeout > 0 {
			ctx, cancel = context.WithTimeout(ctx, p.timeout)
		}
		defer cancel()
		var (
			next ledger.Position
			err  error
		)
		// The batch before takes a connection first: were the pool
		// exhausted by the batches behind it, each waiting for it to
		// lock the position, none could go on.
		if before == nil || before.waitBegan(ctx) == nil {
			next, err = p.sink.writeBatch(ctx, p.cluster, from, lines, before, f)
		} else {
			err = ctx.Err()
		}
		f.res = Result{Position: next, Lines: len(lines), Took: time.Since(start), Err: err}
		close(f.done)
		f.began.fire()
		f.locked.fire()
	}()
	return nil
}

// Ready is closed once the oldest batch in flight has ended, and Wait
// would return at once; nil with nothing in flight.
func (p *Pipeline) Ready() <-chan struct{} {
	if len(p.flights) == 0 {
		return nil
	}
	return p.flights[0].done
}

// Wait waits for the oldest batch in flight and returns its result:
// results come back in the order the batches were sent. After a failed
// batch, the batches behind it fail too, writing nothing, unless the
// failed one's commit went through and only its answer was lost; either
// way, read Position before writing again. Wait with nothing in flight
// returns at once with an error.
func (p *Pipeline) Wait() Result {
	if len(p.flights) == 0 {
		return Result{Err: errors.New("ledgersink: no batch in flight")}
	}
	f := p.flights[0]
	p.flights[0] = nil
	p.flights = p.flights[1:]
	<-f.done
	return f.res
}

// Close waits for every batch in flight to end and drops their results.
// To stop them sooner, cancel the Pipeline's context first.
func (p *Pipeline) Close() {
	for len(p.flights) > 0 {
		p.Wait()
	}
}

// ended reports whether f's transaction is over.
func (f *flight) ended() bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

func (f *flight) waitBegan(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-f.began.c:
		return nil
	}
}

// waitLocked waits until f holds the position's lock, or has ended;
// errBeforeFailed if it ended in failure before holding it.
func (f *flight) waitLocked(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-f.locked.c:
	}
	if f.ended() && f.res.Err != nil {
		return errBeforeFailed
	}
	return nil
}

// holdsLock tells the batch behind f, if any, that f holds the lock.
func (f *flight) holdsLock() {
	if f != nil {
		f.locked.fire()
	}
}

// hasBegun tells the batch behind f, if any, that f has a connection.
func (f *flight) hasBegun() {
	if f != nil {
		f.began.fire()
	}
}
