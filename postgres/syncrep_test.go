package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// syncDown makes every commit of the private server at u wait for a
// synchronous standby that is not there (synchronous_standby_names='*'
// with no standby attached), until the returned function resets it.
func syncDown(t *testing.T, u string) (reset func()) {
	t.Helper()
	exec(t, u, "ALTER SYSTEM SET synchronous_standby_names = '*'")
	exec(t, u, "SELECT pg_reload_conf()")
	done := false
	reset = func() {
		if done {
			return
		}
		done = true
		exec(t, u, "ALTER SYSTEM RESET synchronous_standby_names")
		exec(t, u, "SELECT pg_reload_conf()")
	}
	t.Cleanup(reset)
	// The reload is asynchronous: wait until a commit waits.
	waitFor(t, 10*time.Second, func() bool {
		var v string
		conn, err := pgx.Connect(ctxFor(t, 5*time.Second), u)
		if err != nil {
			return false
		}
		defer conn.Close(context.Background())
		return conn.QueryRow(ctxFor(t, 5*time.Second), "SHOW synchronous_standby_names").Scan(&v) == nil && v == "*"
	})
	return reset
}

// TestSyncStandbyDownCallsEndWithCtx: on a primary whose synchronous
// standby is gone every commit waits ("IPC SyncRep"); the red team's
// `run -n` hung there 12 minutes. Each store call returns when its
// context ends, and a grant whose wait was cut (committed locally, as
// PostgreSQL warns when the wait is cancelled) is given back once commits
// go through again: the lease ends up free, not held by the caller that
// gave up.
func TestSyncStandbyDownCallsEndWithCtx(t *testing.T) {
	srv := enginetest.StartPostgres(t)
	u := srv.PostgresURL()
	s := open(t, u)
	defer s.Close()
	ctx := ctxFor(t, 2*time.Minute)
	held, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "held", Owner: "h", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	reset := syncDown(t, u)
	// The calls go through a store opened now: its connections' server
	// processes start with the new setting. An idle pooled connection of s
	// may run its next command before it applies the reload (CI run 55,
	// on a loaded machine: the cut TryAcquire was granted at once).
	s = open(t, u)
	defer s.Close()

	const cut = 500 * time.Millisecond
	// Generous: the call's own clean-up holds it up at most a little.
	const bound = 5 * time.Second
	calls := []struct {
		name string
		f    func(context.Context) error
	}{
		{"TryAcquire", func(ctx context.Context) error {
			_, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "job", Owner: "cut", RequestID: "r1", TTL: time.Minute})
			return err
		}},
		{"Renew", func(ctx context.Context) error { return s.Renew(ctx, "held", "h", held.Token, time.Minute) }},
		{"Release", func(ctx context.Context) error { return s.Release(ctx, "held", "h", held.Token) }},
		{"AcquireWait", func(ctx context.Context) error {
			_, err := s.AcquireWait(ctx, leasehold.AcquireRequest{Name: "queued", Owner: "w", RequestID: "w1", TTL: time.Minute})
			return err
		}},
	}
	for _, c := range calls {
		cctx, cancel := context.WithTimeout(ctx, cut)
		start := time.Now()
		err := c.f(cctx)
		took := time.Since(start)
		cancel()
		if took > bound {
			t.Errorf("%s with a %s context took %s with the synchronous standby down", c.name, cut, took)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s = %v, want context.DeadlineExceeded", c.name, err)
		}
	}

	reset()
	// The cut grants of "job" and "queued" committed (locally) or not:
	// either way the leases end up not held by those that gave up.
	for name, owner := range map[string]string{"job": "cut", "queued": "w"} {
		waitFor(t, 30*time.Second, func() bool {
			r, err := s.Get(ctx, name)
			return errors.Is(err, leasehold.ErrNotFound) || err == nil && r.Owner != owner
		})
	}
}
