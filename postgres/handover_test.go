package postgres_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/postgres"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// crashedHandover: X holds "n" (by TryAcquire, with ttlX), then P and H
// queue for it, in that order, with a 30 s waiter window (so that a
// waiter that is not told it became the head sleeps 10 s). If release is
// set X releases, which grants P; otherwise X expires and P takes the
// lease itself. P's grant has a 500 ms TTL and is never released (P
// crashed). It returns how long after P's expiry (as P saw it) H was
// granted, and checks the tokens.
func crashedHandover(t *testing.T, u string, release bool, ttlX time.Duration) time.Duration {
	t.Helper()
	window := postgres.WithWaiterWindow(30 * time.Second)
	x, p, h := open(t, u, window), open(t, u, window), open(t, u, window)
	defer x.Close()
	defer p.Close()
	defer h.Close()
	ctx := ctxFor(t, time.Minute)
	xr, err := x.TryAcquire(ctx, leasehold.AcquireRequest{Name: "n", Owner: "x", TTL: ttlX})
	if err != nil {
		t.Fatal(err)
	}
	pDone := make(chan waitResult, 1)
	go func() {
		r, err := p.AcquireWait(ctx, leasehold.AcquireRequest{Name: "n", Owner: "p", TTL: 500 * time.Millisecond})
		pDone <- waitResult{rec: r, err: err}
	}()
	waitQueued(t, p, "n", "p")
	hDone := make(chan waitResult, 1)
	go func() {
		r, err := h.AcquireWait(ctx, leasehold.AcquireRequest{Name: "n", Owner: "h", TTL: time.Minute})
		hDone <- waitResult{rec: r, err: err}
	}()
	waitQueued(t, h, "n", "h")
	if release {
		if err := x.Release(ctx, "n", "x", xr.Token); err != nil {
			t.Fatal(err)
		}
	}
	var pExpiry time.Time
	select {
	case r := <-pDone:
		if r.err != nil || r.rec.Token != xr.Token+1 {
			t.Fatalf("P got %+v, %v; want token %d", r.rec, r.err, xr.Token+1)
		}
		pExpiry = time.Now().Add(r.rec.Remaining)
	case <-time.After(20 * time.Second):
		t.Fatal("P was not granted within 20 s")
	}
	select {
	case r := <-hDone:
		if r.err != nil || r.rec.Token != xr.Token+2 {
			t.Fatalf("H got %+v, %v; want token %d", r.rec, r.err, xr.Token+2)
		}
		return time.Since(pExpiry)
	case <-time.After(20 * time.Second):
		t.Fatal("H was not granted within 20 s")
	}
	return 0
}

// TestQueueNextHeadToldAtHandover: a waiter that becomes the head because
// the lease was granted to the waiter ahead of it (by a release, or by that
// waiter's own call after the holder expired) is told at once, so that when
// the new holder crashes, it takes the lease at that holder's expiry, not
// at its next renewal a third of the window later.
func TestQueueNextHeadToldAtHandover(t *testing.T) {
	base := enginetest.PostgresURL(t)
	for _, c := range []struct {
		name    string
		release bool
		ttlX    time.Duration
	}{{"release", true, time.Minute}, {"expiry", false, time.Second}} {
		t.Run(c.name, func(t *testing.T) {
			u := withParam(base, "table", freshTable(t, base, "lh_test_nexthead_"))
			d := crashedHandover(t, u, c.release, c.ttlX)
			t.Logf("H granted %v after P's expiry", d)
			if d > 5*time.Second { // 1.5 s, a round trip after a timer, was tight on a loaded machine
				t.Errorf("H granted %v after P's expiry; want within 5s", d)
			}
		})
	}
}

// TestOpenReplacesOlderFunctions: a version 2 table whose release function
// an earlier build created (its text without the next head's wake, and no
// version comment) gets this build's functions when opened with migration,
// and not when opened without.
func TestOpenReplacesOlderFunctions(t *testing.T) {
	base := enginetest.PostgresURL(t)
	table := freshTable(t, base, "lh_test_oldfn_")
	u := withParam(base, "table", table)
	open(t, u).Close()
	ctx := ctxFor(t, time.Minute)
	pool, err := pgxpool.New(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	fn := table + "_release(text, text, bigint, text)"
	comment := func() string {
		var c string
		if err := pool.QueryRow(ctx, "SELECT coalesce(obj_description($1::regprocedure, 'pg_proc'), '')", fn).Scan(&c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	current := comment()
	if !strings.HasPrefix(current, "leasehold queue functions ") {
		t.Fatalf("release function comment %q", current)
	}
	var def string
	if err := pool.QueryRow(ctx, "SELECT pg_get_functiondef($1::regprocedure)", fn).Scan(&def); err != nil {
		t.Fatal(err)
	}
	const wake = "PERFORM pg_notify(p_channel, chr(1) || v_next || ' wake');"
	if strings.Count(def, wake) != 1 {
		t.Fatalf("release function has %d wake notifications", strings.Count(def, wake))
	}
	exec(t, base, strings.Replace(def, wake, "NULL;", 1))
	exec(t, base, "COMMENT ON FUNCTION "+fn+" IS NULL")

	// Without migration the functions stay as they are.
	open(t, u, postgres.WithoutMigrate()).Close()
	if c := comment(); c != "" {
		t.Fatalf("Open without migration commented the function %q", c)
	}
	// With it they are replaced (by the first Open to come).
	open(t, u).Close()
	if c := comment(); c != current {
		t.Fatalf("after Open the release function comment is %q, want %q", c, current)
	}
	d := crashedHandover(t, u, true, time.Minute)
	t.Logf("H granted %v after P's expiry", d)
	if d > 1500*time.Millisecond {
		t.Errorf("H granted %v after P's expiry; want within 1.5s", d)
	}
}
