package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/postgres"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// notifications LISTENs on the Store's channel with a connection of its
// own and collects the payloads, as any other process could.
type notifications struct {
	mu       sync.Mutex
	payloads []string
}

func listenTo(t *testing.T, base string, s *postgres.Store) *notifications {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{postgres.Channel(s)}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	n := &notifications{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m, err := conn.WaitForNotification(ctx)
			if err != nil {
				return
			}
			n.mu.Lock()
			n.payloads = append(n.payloads, m.Payload)
			n.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		conn.Close(context.Background())
	})
	return n
}

func (n *notifications) get() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.payloads...)
}

func queueRows(t *testing.T, base string, s *postgres.Store, name string) int {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	pool, err := pgxpool.New(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+postgres.QueueTable(s)+" WHERE name = $1", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func waitQueued(t *testing.T, s *postgres.Store, name, owner string) {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	waitFor(t, 20*time.Second, func() bool {
		ok, err := postgres.Queued(ctx, s, name, owner)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	})
}

type waitResult struct {
	who int
	rec leasehold.Record
	err error
}

// holdLease has owner take the lease name on s for ttl, and fails the
// test if it is not granted.
func holdLease(t *testing.T, ctx context.Context, s *postgres.Store, name, owner string, ttl time.Duration) leasehold.Record {
	t.Helper()
	rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: name, Owner: owner, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// startWait runs owner's AcquireWait of name on s (a TTL of a minute) in a
// goroutine; its result arrives on the channel returned.
func startWait(ctx context.Context, s *postgres.Store, name, owner string) <-chan waitResult {
	done := make(chan waitResult, 1)
	go func() {
		r, err := s.AcquireWait(ctx, leasehold.AcquireRequest{Name: name, Owner: owner, TTL: time.Minute})
		done <- waitResult{rec: r, err: err}
	}()
	return done
}

// queueWait is startWait, returning once the waiter is queued.
func queueWait(t *testing.T, ctx context.Context, s *postgres.Store, name, owner string) <-chan waitResult {
	t.Helper()
	done := startWait(ctx, s, name, owner)
	waitQueued(t, s, name, owner)
	return done
}

// TestQueueFIFOAcrossStores: eight waiters, each on a Store of its own
// (its own pool and listener: another process, as far as the server can
// tell), enqueue one after another while a ninth Store holds the lease.
// Each release hands the lease to the next in arrival order, by one
// notification addressed to that waiter alone, which it learns its grant
// from without polling; the last release, with nobody waiting, notifies
// nobody.
func TestQueueFIFOAcrossStores(t *testing.T) {
	base := enginetest.PostgresURL(t)
	u := withParam(base, "table", freshTable(t, base, "lh_test_fifo_"))
	window := postgres.WithWaiterWindow(time.Minute) // no renewal during the test
	holder := open(t, u, window)
	defer holder.Close()
	heard := listenTo(t, base, holder)
	ctx := ctxFor(t, 2*time.Minute)
	rec := holdLease(t, ctx, holder, "f", "holder", time.Minute)
	const n = 8
	stores := make([]*postgres.Store, n)
	results := make(chan waitResult, n)
	for i := range stores {
		stores[i] = open(t, u, window)
		defer stores[i].Close()
		go func() {
			owner := fmt.Sprintf("w%d", i)
			r, err := stores[i].AcquireWait(ctx, leasehold.AcquireRequest{Name: "f", Owner: owner, RequestID: "r" + owner, TTL: time.Minute})
			results <- waitResult{i, r, err}
			if err == nil {
				time.Sleep(5 * time.Millisecond)
				if err := stores[i].Release(ctx, "f", owner, r.Token); err != nil {
					t.Errorf("%s: Release: %v", owner, err)
				}
			}
		}()
		waitQueued(t, stores[i], "f", fmt.Sprintf("w%d", i))
	}
	if got := queueRows(t, base, holder, "f"); got != n {
		t.Fatalf("queue rows = %d, want %d", got, n)
	}
	if err := holder.Release(ctx, "f", "holder", rec.Token); err != nil {
		t.Fatal(err)
	}
	last := rec.Token
	for want := 0; want < n; want++ {
		r := <-results
		if r.err != nil || r.who != want {
			t.Fatalf("grant %d went to w%d (%v), want w%d", want, r.who, r.err, want)
		}
		if r.rec.Token <= last || r.rec.Owner != fmt.Sprintf("w%d", want) {
			t.Errorf("grant %d: %+v, want owner w%d and a token above %d", want, r.rec, want, last)
		}
		last = r.rec.Token
	}
	waitFor(t, 10*time.Second, func() bool { return len(heard.get()) >= n })
	time.Sleep(300 * time.Millisecond) // a notification of the last release would have come by now
	for i, p := range heard.get() {
		if i >= n || !strings.HasPrefix(p, "\x01") {
			t.Errorf("notification %d: %q; want exactly %d, each addressed to a waiter", i, p, n)
		}
	}
	for i, s := range stores {
		if steps, notes := postgres.WaitSteps(s), postgres.WaiterNotes(s); steps != 1 || notes != 1 {
			t.Errorf("w%d called the wait function %d times and was notified %d times, want once each", i, steps, notes)
		}
	}
	if got := queueRows(t, base, holder, "f"); got != 0 {
		t.Errorf("queue rows after all grants = %d, want 0", got)
	}
}

// TestQueueNoNotifyUncontended: a release that nobody waits for or
// watches sends no NOTIFY; with a Watch on the name (by another Store) it
// notifies the name, and once that Watch ended and its interest lapsed it
// stops again.
func TestQueueNoNotifyUncontended(t *testing.T) {
	base := enginetest.PostgresURL(t)
	u := withParam(base, "table", freshTable(t, base, "lh_test_quiet_"))
	window := postgres.WithWaiterWindow(500 * time.Millisecond)
	a, b := open(t, u, window), open(t, u, window)
	defer a.Close()
	defer b.Close()
	heard := listenTo(t, base, a)
	ctx := ctxFor(t, time.Minute)
	pair := func(name string) {
		t.Helper()
		rec, err := a.TryAcquire(ctx, leasehold.AcquireRequest{Name: name, Owner: "a", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Release(ctx, name, "a", rec.Token); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 5; i++ {
		pair("u")
	}
	time.Sleep(300 * time.Millisecond)
	if got := heard.get(); len(got) != 0 {
		t.Fatalf("uncontended releases notified %q, want nothing", got)
	}
	wctx, stop := context.WithCancel(ctx)
	ch, err := b.Watch(wctx, "u")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, func() bool { return postgres.Listens(b) >= 1 })
	drain(ch)
	pair("u")
	pair("other") // watched by nobody
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("the watcher was not notified of the release")
	}
	waitFor(t, 10*time.Second, func() bool { return len(heard.get()) >= 1 })
	time.Sleep(200 * time.Millisecond)
	if got := heard.get(); len(got) != 1 || got[0] != "u" {
		t.Fatalf("notifications %q, want exactly one, of u", got)
	}
	stop()
	time.Sleep(time.Second) // twice the window: the interest lapsed
	pair("u")
	time.Sleep(300 * time.Millisecond)
	if got := heard.get(); len(got) != 1 {
		t.Errorf("a release after the Watch ended notified: %q", got[1:])
	}
}

// TestQueueHeadTakesExpiredLease: a holder that never releases; the head
// waiter takes the lease at the holder's expiry, not at its next renewal
// of its entry (a third of the window, here 20s).
func TestQueueHeadTakesExpiredLease(t *testing.T) {
	base := enginetest.PostgresURL(t)
	u := withParam(base, "table", freshTable(t, base, "lh_test_expiry_"))
	s := open(t, u, postgres.WithWaiterWindow(time.Minute))
	defer s.Close()
	ctx := ctxFor(t, time.Minute)
	// 3 s: the holder must still hold at the waiter's first step, which
	// comes after its listener's connection and LISTEN (500 ms could run
	// out first on a loaded machine, and the first step took the lease).
	rec := holdLease(t, ctx, s, "e", "gone", 3*time.Second)
	start := time.Now()
	got, err := s.AcquireWait(ctx, leasehold.AcquireRequest{Name: "e", Owner: "next", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 10*time.Second || got.Token != rec.Token+1 {
		t.Errorf("granted token %d after %s; want token %d soon after the holder's expiry (3s)", got.Token, took, rec.Token+1)
	}
	if steps := postgres.WaitSteps(s); steps != 2 {
		t.Errorf("wait function called %d times, want 2 (enqueue, then at the holder's expiry)", steps)
	}
}

// TestQueueVanishedWaiter: a waiter whose process died (its Store closed
// without leaving the queue) keeps its entry for the waiter window at
// most; the release after that hands the lease to the waiter behind it and
// deletes the dead entry.
func TestQueueVanishedWaiter(t *testing.T) {
	base := enginetest.PostgresURL(t)
	u := withParam(base, "table", freshTable(t, base, "lh_test_vanish_"))
	window := postgres.WithWaiterWindow(time.Second)
	holder, dead, alive := open(t, u, window), open(t, u, window), open(t, u, window)
	defer holder.Close()
	defer alive.Close()
	ctx := ctxFor(t, time.Minute)
	rec := holdLease(t, ctx, holder, "v", "holder", time.Minute)
	deadDone := queueWait(t, ctx, dead, "v", "dead")
	aliveDone := queueWait(t, ctx, alive, "v", "alive")
	dead.Close()
	if err := (<-deadDone).err; !errors.Is(err, leasehold.ErrClosed) {
		t.Errorf("AcquireWait on a closed Store: %v, want ErrClosed", err)
	}
	if got := queueRows(t, base, holder, "v"); got != 2 {
		t.Fatalf("queue rows after the waiter vanished = %d, want 2 (its entry stays until it lapses)", got)
	}
	vanished := time.Now()
	waitFor(t, 20*time.Second, func() bool {
		ok, err := postgres.Queued(ctx, holder, "v", "dead")
		return err == nil && !ok
	})
	if lapsed := time.Since(vanished); lapsed > 5*time.Second {
		t.Errorf("the dead entry lapsed after %s, want about the 1s window", lapsed)
	}
	if err := holder.Release(ctx, "v", "holder", rec.Token); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-aliveDone:
		if r.err != nil || r.rec.Token != rec.Token+1 {
			t.Fatalf("the live waiter got %+v, %v; want token %d", r.rec, r.err, rec.Token+1)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the live waiter was not granted within 10s of the release")
	}
	if got := queueRows(t, base, holder, "v"); got != 0 {
		t.Errorf("queue rows after the grant = %d, want 0 (the dead entry deleted)", got)
	}
}

// TestQueueTryAcquireDoesNotOvertake: while a live waiter is queued, a
// free lease is not granted to TryAcquire: the answer names the head
// waiter's owner with token 0 and changes nothing. The live holder's
// retry (same owner and request id) is still served. Once the waiter's
// entry lapses, TryAcquire is granted with the next token.
func TestQueueTryAcquireDoesNotOvertake(t *testing.T) {
	base := enginetest.PostgresURL(t)
	u := withParam(base, "table", freshTable(t, base, "lh_test_overtake_"))
	// The holder's TTL must outlive the waiter's enqueue and the retry, and
	// the waiter's window the holder's expiry and the checks after it: 3 s
	// and 10 s (300 ms and 2 s could run out first on a loaded machine).
	window := postgres.WithWaiterWindow(10 * time.Second)
	s, waiter := open(t, u, window), open(t, u, window)
	defer s.Close()
	ctx := ctxFor(t, 2*time.Minute)
	hold := leasehold.AcquireRequest{Name: "o", Owner: "holder", RequestID: "r1", TTL: 3 * time.Second}
	rec, err := s.TryAcquire(ctx, hold)
	if err != nil {
		t.Fatal(err)
	}
	queueWait(t, ctx, waiter, "o", "queued")
	if again, err := s.TryAcquire(ctx, hold); err != nil || again.Token != rec.Token {
		t.Errorf("the holder's retry with a waiter queued: %+v, %v; want its grant (token %d) back", again, err, rec.Token)
	}
	waiter.Close() // vanished: its entry stays live for the window
	// Until the holder's expiry.
	waitFor(t, 20*time.Second, func() bool {
		_, err := s.Get(ctx, "o")
		return errors.Is(err, leasehold.ErrNotFound)
	})
	_, err = s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "o", Owner: "other", TTL: time.Minute})
	var held *leasehold.HeldError
	if !errors.As(err, &held) || held.Owner != "queued" || held.Token != 0 || held.Remaining <= 0 || held.Remaining > time.Second {
		t.Fatalf("TryAcquire of a free lease with a waiter queued: %v (%+v), want held by the waiter, token 0, a short hint", err, held)
	}
	waitFor(t, 40*time.Second, func() bool {
		ok, err := postgres.Queued(ctx, s, "o", "queued")
		return err == nil && !ok
	})
	got, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "o", Owner: "other", TTL: time.Minute})
	if err != nil || got.Token != rec.Token+1 {
		t.Errorf("TryAcquire after the entry lapsed: %+v, %v; want token %d (the refusal changed nothing)", got, err, rec.Token+1)
	}
}

// TestQueueCancelLeavesNoEntry: a waiter whose ctx ends deletes its entry;
// and when a release granted it the lease just as it left, leaving
// releases that grant.
func TestQueueCancelLeavesNoEntry(t *testing.T) {
	base := enginetest.PostgresURL(t)
	u := withParam(base, "table", freshTable(t, base, "lh_test_cancel_"))
	s, w := open(t, u), open(t, u)
	defer s.Close()
	defer w.Close()
	ctx := ctxFor(t, time.Minute)
	rec := holdLease(t, ctx, s, "c", "holder", time.Minute)
	wctx, cancel := context.WithCancel(ctx)
	done := queueWait(t, wctx, w, "c", "w")
	cancel()
	if err := (<-done).err; !errors.Is(err, context.Canceled) {
		t.Fatalf("AcquireWait after cancel: %v, want context.Canceled", err)
	}
	if got := queueRows(t, base, s, "c"); got != 0 {
		t.Fatalf("queue rows after the waiter left = %d, want 0", got)
	}

	// The race: the release hands the lease to the waiter (deleting its
	// entry) just before the waiter leaves.
	if granted, _, err := postgres.WaitStep(ctx, w, "c", "w", "waiter-x", "rid-x", time.Minute); err != nil || granted {
		t.Fatalf("enqueue: granted=%v, %v", granted, err)
	}
	if err := s.Release(ctx, "c", "holder", rec.Token); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, "c"); err != nil || got.Owner != "w" {
		t.Fatalf("after the release: %+v, %v; want held by the queued waiter", got, err)
	}
	postgres.Leave(ctx, w, "c", "w", "waiter-x", "rid-x")
	if got, err := s.Get(ctx, "c"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Errorf("after the waiter left: %+v, %v; want its grant released", got, err)
	}
	if got := queueRows(t, base, s, "c"); got != 0 {
		t.Errorf("queue rows = %d, want 0", got)
	}
}

// TestQueueHeadLeaves: when the head waiter leaves, the next waiter is
// woken and learns that it is the head, so it takes the lease at the
// holder's expiry, not at its next renewal (a third of the window, here
// 20s).
func TestQueueHeadLeaves(t *testing.T) {
	base := enginetest.PostgresURL(t)
	u := withParam(base, "table", freshTable(t, base, "lh_test_headleaves_"))
	window := postgres.WithWaiterWindow(time.Minute)
	holder, a, b := open(t, u, window), open(t, u, window), open(t, u, window)
	defer holder.Close()
	defer a.Close()
	defer b.Close()
	ctx := ctxFor(t, time.Minute)
	rec := holdLease(t, ctx, holder, "h", "gone", 2*time.Second)
	actx, cancel := context.WithCancel(ctx)
	aDone := queueWait(t, actx, a, "h", "a")
	bDone := queueWait(t, ctx, b, "h", "b")
	cancel()
	if err := (<-aDone).err; !errors.Is(err, context.Canceled) {
		t.Fatalf("the head's AcquireWait: %v, want context.Canceled", err)
	}
	select {
	case r := <-bDone:
		if r.err != nil || r.rec.Token != rec.Token+1 {
			t.Fatalf("the next waiter got %+v, %v; want token %d", r.rec, r.err, rec.Token+1)
		}
	case <-time.After(12 * time.Second):
		t.Fatal("the next waiter did not take the lease within 12s (the holder expired after 2s)")
	}
}

// TestWaiterWindowRejected: a window outside its bounds is refused before
// anything is dialled.
func TestWaiterWindowRejected(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	for _, d := range []time.Duration{0, time.Millisecond, postgres.MinWaiterWindow - 1, postgres.MaxWaiterWindow + 1} {
		_, err := postgres.Open(ctx, "postgres://127.0.0.1:1/db", postgres.WithWaiterWindow(d))
		if !errors.Is(err, leasehold.ErrInvalid) || !strings.Contains(err.Error(), "waiter window") {
			t.Errorf("WithWaiterWindow(%s): %v, want an invalid-argument error naming the waiter window", d, err)
		}
	}
}

// TestUncontendedTouchesNoQueue: an acquire and release of a name that
// nobody waits for or watches reads neither the queue table nor calls a
// function: they complete while another transaction holds the queue table
// in ACCESS EXCLUSIVE mode (which even a plan that only mentions the table
// waits for). Once a Watch marked the name, Release goes through the
// release function again (it waits for the lock, and notifies when it is
// gone).
func TestUncontendedTouchesNoQueue(t *testing.T) {
	base := enginetest.PostgresURL(t)
	u := withParam(base, "table", freshTable(t, base, "lh_test_noqueue_"))
	s, w := open(t, u), open(t, u)
	defer s.Close()
	defer w.Close()
	ctx := ctxFor(t, time.Minute)
	pair := func(ctx context.Context) error {
		rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "n", Owner: "o", TTL: time.Minute})
		if err != nil {
			return err
		}
		return s.Release(ctx, "n", "o", rec.Token)
	}
	if err := pair(ctx); err != nil { // the name's row exists from here on
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE "+postgres.QueueTable(s)+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := pair(pctx)
		cancel()
		if err != nil {
			tx.Rollback(ctx)
			t.Fatalf("uncontended pair %d with the queue table locked: %v; want it done without the queue", i, err)
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	heard := listenTo(t, base, s)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	if _, err := w.Watch(wctx, "n"); err != nil {
		t.Fatal(err)
	}
	rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "n", Owner: "o", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	tx, err = conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE "+postgres.QueueTable(s)+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err = s.Release(rctx, "n", "o", rec.Token)
	cancel()
	tx.Rollback(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Release of a watched name with the queue table locked: %v; want it to wait for the lock (the release function)", err)
	}
	if err := s.Release(ctx, "n", "o", rec.Token); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool { return len(heard.get()) >= 1 })
	if got := heard.get(); got[0] != "n" {
		t.Errorf("notifications %q, want n", got)
	}
}

// TestQueueEnqueueRacesRelease: a waiter that enqueues while the holder
// releases is never stranded: either the release sees the queued marker
// and hands the lease over, or the waiter's call finds the lease free and
// takes it. With a one-minute window the waiter renews only every 20 s,
// so a stranded waiter would show as a wait of many seconds.
func TestQueueEnqueueRacesRelease(t *testing.T) {
	base := enginetest.PostgresURL(t)
	u := withParam(base, "table", freshTable(t, base, "lh_test_race_"))
	window := postgres.WithWaiterWindow(time.Minute)
	holder, waiter := open(t, u, window), open(t, u, window)
	defer holder.Close()
	defer waiter.Close()
	ctx := ctxFor(t, 2*time.Minute)
	for i := 0; i < 40; i++ {
		rec, err := holder.TryAcquire(ctx, leasehold.AcquireRequest{Name: "r", Owner: "holder", TTL: time.Minute})
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		got := startWait(ctx, waiter, "r", "waiter")
		time.Sleep(time.Duration(i%8) * 250 * time.Microsecond) // release before, while, after the waiter enqueues
		if err := holder.Release(ctx, "r", "holder", rec.Token); err != nil {
			t.Fatalf("round %d: Release: %v", i, err)
		}
		select {
		case r := <-got:
			if r.err != nil || r.rec.Token != rec.Token+1 {
				t.Fatalf("round %d: the waiter got %+v, %v; want token %d", i, r.rec, r.err, rec.Token+1)
			}
			if err := waiter.Release(ctx, "r", "waiter", r.rec.Token); err != nil {
				t.Fatalf("round %d: the waiter's Release: %v", i, err)
			}
		case <-time.After(8 * time.Second):
			t.Fatalf("round %d: the waiter was stranded (no grant 8 s after the release)", i)
		}
	}
	if got := queueRows(t, base, holder, "r"); got != 0 {
		t.Errorf("queue rows = %d, want 0", got)
	}
}
