package retry

import (
	"fmt"
	"math"
	"sync/atomic"
)

// milli is the budget's resolution: tokens are counted in thousandths, as
// gRPC does, so that adding a ratio of 0.1 ten times gives exactly one.
const milli = 1000

// maxBudgetTokens bounds maxTokens so that token counts stay exact.
const maxBudgetTokens = 1e9

// Budget limits retries to a fraction of requests, as gRPC's retry
// throttling does. It holds up to maxTokens tokens and starts full. Every
// failed attempt (a response or error worth retrying) costs one token, and
// every successful one adds tokenRatio. Retries are allowed only while more
// than maxTokens/2 tokens remain.
//
// So while the server keeps failing, about maxTokens/2 retries are made and
// then none, and over any run the number of retries is below
// maxTokens/2 + tokenRatio × successes: the budget caps the load retries add
// at roughly tokenRatio times the successful load.
//
// A Budget is safe for concurrent use and may be shared by several
// Transports, which are then throttled together.
type Budget struct {
	tokens atomic.Int64 // thousandths of a token, in [0, max]
	max    int64        // maxTokens in thousandths
	ratio  int64        // tokenRatio in thousandths
}

// NewBudget returns a full budget of maxTokens tokens that regains
// tokenRatio tokens per success. maxTokens must be positive and at most 1e9;
// tokenRatio must be at least 0.001, the budget's resolution. gRPC's
// defaults are NewBudget(10, 0.1).
func NewBudget(maxTokens, tokenRatio float64) (*Budget, error) {
	if !(maxTokens > 0) || maxTokens > maxBudgetTokens {
		return nil, &ConfigError{Field: "maxTokens", Reason: fmt.Sprintf("%v is not in (0, %g]", maxTokens, float64(maxBudgetTokens))}
	}
	if !(tokenRatio > 0) || math.IsInf(tokenRatio, 1) {
		return nil, &ConfigError{Field: "tokenRatio", Reason: fmt.Sprintf("%v is not a positive number", tokenRatio)}
	}
	m := int64(math.Round(maxTokens * milli))
	if m < 1 {
		return nil, &ConfigError{Field: "maxTokens", Reason: fmt.Sprintf("%v is below the resolution of 0.001", maxTokens)}
	}
	r := m // a ratio above maxTokens refills the budget at once
	if tokenRatio < maxTokens {
		r = int64(math.Round(tokenRatio * milli))
	}
	if r < 1 {
		return nil, &ConfigError{Field: "tokenRatio", Reason: fmt.Sprintf("%v is below the resolution of 0.001", tokenRatio)}
	}
	b := &Budget{max: m, ratio: r}
	b.tokens.Store(m)
	return b, nil
}

// RecordFailure spends one token for a failed attempt and reports whether a
// retry is still allowed afterwards.
func (b *Budget) RecordFailure() (mayRetry bool) {
	for {
		old := b.tokens.Load()
		next := max(old-milli, 0)
		if b.tokens.CompareAndSwap(old, next) {
			return b.allows(next)
		}
	}
}

// RecordSuccess adds tokenRatio tokens for a successful attempt, up to
// maxTokens.
func (b *Budget) RecordSuccess() {
	for {
		old := b.tokens.Load()
		next := min(old+b.ratio, b.max)
		if b.tokens.CompareAndSwap(old, next) {
			return
		}
	}
}

// MayRetry reports whether retries are currently allowed: whether more than
// maxTokens/2 tokens remain.
func (b *Budget) MayRetry() bool { return b.allows(b.tokens.Load()) }

// Tokens returns the number of tokens left.
func (b *Budget) Tokens() float64 { return float64(b.tokens.Load()) / milli }

func (b *Budget) allows(tokens int64) bool { return 2*tokens > b.max }
