package fleet

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// Wait polls cond every PollInterval until it holds, timeout passes, or a
// coordinator has exited that nothing stopped (whatever cond waits for
// may then never come). cond gets a context that ends with the timeout;
// when it does not hold it says why, and the timeout's error ends with
// the last reason. An error from cond ends the wait with it.
func (c *Cluster) Wait(ctx context.Context, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string, error)) error {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(c.poll)
	defer t.Stop()
	for {
		ok, why, err := cond(wctx)
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if err := c.ExitedEarly(); err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		select {
		case <-wctx.Done():
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("waiting for %s: %w", what, err)
			}
			if why != "" {
				why = " (last: " + why + ")"
			}
			return fmt.Errorf("timed out after %v waiting for %s%s", timeout, what, why)
		case <-t.C:
		}
	}
}

// WaitLeader waits until some member leads. A coordinator that exited by
// itself ends the wait, even with a leader.
func (c *Cluster) WaitLeader(ctx context.Context, timeout time.Duration) (*Coordinator, error) {
	var leader *Coordinator
	err := c.Wait(ctx, timeout, "a leader", func(ctx context.Context) (bool, string, error) {
		if err := c.ExitedEarly(); err != nil {
			return false, "", err
		}
		leader, _ = c.Leader(ctx)
		return leader != nil, "no member leads", nil
	})
	return leader, err
}

// WaitVoters waits until the leader counts n voters.
func (c *Cluster) WaitVoters(ctx context.Context, n int, timeout time.Duration) error {
	return c.Wait(ctx, timeout, fmt.Sprintf("%d voting members", n), func(ctx context.Context) (bool, string, error) {
		if err := c.ExitedEarly(); err != nil {
			return false, "", err
		}
		leader, st := c.Leader(ctx)
		if leader == nil {
			return false, "no member leads", nil
		}
		return st.Voters() >= n, fmt.Sprintf("leader %s counts %d voters", leader.ID, st.Voters()), nil
	})
}

// WaitFormed waits until every coordinator answers, counts them all as
// voters and knows the leader and its gRPC address: a call to any member,
// a follower's forwarded to the leader, then works.
func (c *Cluster) WaitFormed(ctx context.Context, timeout time.Duration) error {
	what := fmt.Sprintf("%d members, each counting every one a voter and knowing the leader", len(c.Coords))
	return c.Wait(ctx, timeout, what, func(ctx context.Context) (bool, string, error) {
		if err := c.ExitedEarly(); err != nil {
			return false, "", err
		}
		for _, co := range c.Coords {
			st, err := c.Status(ctx, co)
			if err != nil {
				return false, err.Error(), nil
			}
			if st.Voters() != len(c.Coords) || st.LeaderID == "" || st.LeaderGRPC == "" {
				return false, fmt.Sprintf("%s counts %d voters, leader %q at %q", co.ID, st.Voters(), st.LeaderID, st.LeaderGRPC), nil
			}
		}
		return true, "", nil
	})
}

// WaitHTTP waits until url answers 200.
func (c *Cluster) WaitHTTP(ctx context.Context, p *Proc, url string, timeout time.Duration) error {
	return Poll(ctx, timeout, url, func() (bool, error) {
		if !p.Running() {
			return false, fmt.Errorf("%s exited (see %s)", p.Name, p.LogPath)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := c.HTTP.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// ExitedEarly reports a coordinator that exited while it should run:
// one that nothing stopped (Proc.UnexpectedExit).
func (c *Cluster) ExitedEarly() error {
	for _, co := range c.Coords {
		if err := co.UnexpectedExit(); err != nil {
			return fmt.Errorf("coordinator %w", err)
		}
	}
	return nil
}

// Poll calls cond every 200 ms until it holds, fails, or timeout passes.
func Poll(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s", timeout, what)
		}
		if err := Sleep(ctx, 200*time.Millisecond); err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
	}
}

// Sleep waits d or until ctx is done.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
