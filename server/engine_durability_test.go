package server

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/testrig/servertest"
)

// stuckEngine opens a durable engine in a new directory whose group
// commits can be held back: stick makes every later group commit wait
// until unstick is called (unstick is also registered to run before the
// engine is closed, which waits for the log).
func stuckEngine(t *testing.T) (e *Engine, stick, unstick func()) {
	t.Helper()
	var stuck sync.Mutex
	e, err := OpenEngine(EngineConfig{Dir: t.TempDir(), Hooks: Hooks{Sync: func(time.Duration, int) {
		stuck.Lock()
		stuck.Unlock()
	}}})
	if err != nil {
		t.Fatal(err)
	}
	var once *sync.Once
	stick = func() {
		stuck.Lock()
		once = new(sync.Once)
	}
	unstick = func() {
		if once != nil {
			once.Do(stuck.Unlock)
		}
	}
	t.Cleanup(func() {
		unstick()
		e.Close()
	})
	return e, stick, unstick
}

// inMemory waits until cond, checked under the engine's lock, holds.
func inMemory(t *testing.T, e *Engine, cond func() bool) {
	t.Helper()
	servertest.WaitFor(t, "the condition under the engine's lock", func() bool {
		e.lock()
		defer e.unlock()
		return cond()
	})
}

// read is one answer of Get or List.
type read struct {
	op   string
	recs []leasehold.Record
	err  error
}

// reads starts a Get and a List of name and returns where they answer.
func reads(e *Engine, name string) <-chan read {
	out := make(chan read, 2)
	ctx := context.Background()
	go func() {
		rec, err := e.Get(ctx, name)
		var recs []leasehold.Record
		if err == nil {
			recs = []leasehold.Record{rec}
		}
		out <- read{"get", recs, err}
	}()
	go func() {
		recs, err := e.List(ctx, "")
		out <- read{"list", recs, err}
	}()
	return out
}

// TestReadsReportOnlyDurableState: Get and List report a grant, or a
// release, only once it is durable. A grant still waiting for its group
// commit was acknowledged to no one and a crash would undo it; a reader
// told of it would have seen a holder that, after the restart, never
// existed (and a release that a crash undoes would show a free lease that
// comes back held). A read that answers while the commit is held back may
// show the state as it was before, never the undurable change. The same
// holds for ForceRelease's "not found".
func TestReadsReportOnlyDurableState(t *testing.T) {
	e, stick, unstick := stuckEngine(t)
	ctx := context.Background()
	req := pxReq("d", "a", time.Hour)

	// A grant not yet durable.
	stick()
	granted := acquireAsync(ctx, e, req)
	inMemory(t, e, func() bool { ent := e.leases["d"]; return ent != nil && ent.held })
	answers := reads(e, "d")
	early := map[string]bool{}
	for timeout := time.After(300 * time.Millisecond); len(early) < 2; {
		select {
		case r := <-answers:
			if len(r.recs) != 0 {
				t.Fatalf("%s reported %+v before the grant was durable", r.op, r.recs)
			}
			early[r.op] = true
			continue
		case <-timeout:
		}
		break
	}
	unstick()
	if err := <-granted; err != nil {
		t.Fatal(err)
	}
	for range 2 - len(early) {
		if r := <-answers; r.err != nil || len(r.recs) != 1 || r.recs[0].Owner != "a" {
			t.Fatalf("%s after the commit: %+v, %v; want a's grant", r.op, r.recs, r.err)
		}
	}
	rec, err := e.Get(ctx, "d")
	if err != nil || rec.Owner != "a" {
		t.Fatalf("Get after the commit: %+v, %v", rec, err)
	}

	// A release not yet durable.
	stick()
	released := make(chan error, 1)
	go func() { released <- e.Release(ctx, "d", "a", rec.Token) }()
	inMemory(t, e, func() bool { return !e.leases["d"].held })
	answers = reads(e, "d")
	forced := make(chan error, 1) // "not found" is a report of the state too
	go func() { _, err := e.ForceRelease(ctx, "d"); forced <- err }()
	early = map[string]bool{}
	for timeout := time.After(300 * time.Millisecond); len(early) < 2; {
		select {
		case r := <-answers:
			if r.err != nil || len(r.recs) != 1 || r.recs[0].Owner != "a" {
				t.Fatalf("%s answered %+v, %v before the release was durable; want a's grant or no answer yet", r.op, r.recs, r.err)
			}
			early[r.op] = true
			continue
		case <-timeout:
		}
		break
	}
	select {
	case err := <-forced:
		t.Fatalf("ForceRelease answered %v before the release was durable", err)
	default:
	}
	unstick()
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	if err := <-forced; !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("ForceRelease after the release's commit: %v, want ErrNotFound", err)
	}
	for range 2 - len(early) {
		if r := <-answers; len(r.recs) != 0 || r.op == "get" && !errors.Is(r.err, leasehold.ErrNotFound) {
			t.Fatalf("%s after the release's commit: %+v, %v; want nothing", r.op, r.recs, r.err)
		}
	}
}

// TestRefusalWaitsForDurability: a refusal reports the state of the name,
// so it is answered only once that state is durable. Otherwise a crash
// between the answer and the group commit would leave the history with a
// "held by a" (or "not held") that the recovered state contradicts: R3 saw
// a "held by" naming a grant that the restarted server did not have.
func TestRefusalWaitsForDurability(t *testing.T) {
	e, stick, unstick := stuckEngine(t)
	ctx := context.Background()
	acquire := func(owner string) error {
		_, err := e.Acquire(ctx, pxReq("n", owner, time.Minute))
		return err
	}

	stick() // from here no group commit completes
	type answer struct {
		name string
		err  error
	}
	answers := make(chan answer, 4)
	go func() { answers <- answer{"acquire a", acquire("a")} }()
	// Until a's grant is in memory (not durable: the log is stuck).
	inMemory(t, e, func() bool { ent := e.leases["n"]; return ent != nil && ent.held && ent.owner == "a" })
	go func() { answers <- answer{"acquire b", acquire("b")} }()
	go func() { answers <- answer{"renew b", e.Renew(ctx, "n", "b", 1, time.Minute)} }()
	go func() { answers <- answer{"release b", e.Release(ctx, "n", "b", 1)} }()
	select {
	case a := <-answers:
		t.Fatalf("%s answered (%v) before the state it reports was durable", a.name, a.err)
	case <-time.After(300 * time.Millisecond):
	}
	unstick()
	got := map[string]error{}
	for len(got) < 4 {
		a := <-answers
		got[a.name] = a.err
	}
	var he *leasehold.HeldError
	if got["acquire a"] != nil || !errors.As(got["acquire b"], &he) || he.Owner != "a" ||
		!errors.Is(got["renew b"], leasehold.ErrNotHeld) || !errors.Is(got["release b"], leasehold.ErrNotHeld) {
		t.Fatalf("answers after the commit: %v", got)
	}
}

// stopExpiryLoop stops e's expiry loop, as if it were late: expiries are
// then applied only by the calls that meet them. Close still works.
func stopExpiryLoop(e *Engine) {
	close(e.stop)
	<-e.loopDone
	e.stop = make(chan struct{}) // for Close, which closes it again
}

// TestWaiterSeesDueExpiry: a queued waiter whose wait ends at the very
// moment the holder's lease expires gets the lease, even when the engine's
// expiry loop has not run yet (it shares that instant, or is late on a
// loaded machine): the expiry is applied before the waiter is refused.
func TestWaiterSeesDueExpiry(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	e, err := OpenEngine(EngineConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	stopExpiryLoop(e)
	ctx := context.Background()
	req := func(owner string, ttl, wait time.Duration) AcquireRequest {
		r := pxReq("x", owner, ttl)
		r.Wait = wait
		return r
	}
	first, err := e.Acquire(ctx, req("a", time.Second, 0))
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		rec leasehold.Record
		err error
	}
	got := make(chan answer, 1)
	go func() {
		rec, err := e.Acquire(ctx, req("b", time.Minute, time.Second))
		got <- answer{rec, err}
	}()
	clk.WaitForTimers(1) // b is queued and waiting
	clk.Advance(time.Second)
	b := <-got
	if b.err != nil || b.rec.Owner != "b" || b.rec.Token <= first.Token {
		t.Fatalf("waiter whose wait ended as the holder's lease expired: %+v, %v; want the lease", b.rec, b.err)
	}
	if rec, err := e.Get(ctx, "x"); err != nil || rec.Owner != "b" {
		t.Fatalf("Get: %+v, %v; want b's grant", rec, err)
	}

	// A waiter whose wait ends before the expiry is due is refused, and
	// told who holds the lease.
	go func() {
		rec, err := e.Acquire(ctx, req("c", time.Minute, time.Second))
		got <- answer{rec, err}
	}()
	clk.WaitForTimers(1)
	clk.Advance(time.Second)
	c := <-got
	var held *leasehold.HeldError
	if !errors.As(c.err, &held) || held.Owner != "b" || held.Token != b.rec.Token {
		t.Fatalf("waiter whose wait ended before the expiry: %+v, %v; want held by b", c.rec, c.err)
	}
}

// TestReleaseAckedWhenDurable: a release is answered only once its record
// is durable, like a grant, although only the releaser could notice the
// difference before a crash: a release acknowledged earlier and lost in a
// crash would bring the grant back after the restart, held by an owner
// told it was released (docs/server.md, "Why a release waits for its
// fdatasync too"). The same holds for the release that hands the lease to
// a waiter: both answers wait for the one commit holding both records.
func TestReleaseAckedWhenDurable(t *testing.T) {
	e, stick, unstick := stuckEngine(t)
	ctx := context.Background()
	rec, err := e.Acquire(ctx, pxReq("n", "a", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	stick()
	answers := make(chan string, 2)
	go func() {
		if err := e.Release(ctx, "n", "a", rec.Token); err != nil {
			t.Errorf("release: %v", err)
		}
		answers <- "release a"
	}()
	inMemory(t, e, func() bool { return !e.leases["n"].held })
	select {
	case a := <-answers:
		t.Fatalf("%s answered before its record was durable", a)
	case <-time.After(300 * time.Millisecond):
	}
	unstick()
	if a := <-answers; a != "release a" {
		t.Fatal(a)
	}

	// A handoff: b waits, a's second grant is released while the log is
	// stuck; neither answer comes before the commit.
	rec, err = e.Acquire(ctx, pxReq("n", "a", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		req := pxReq("n", "b", time.Minute)
		req.Wait = time.Minute
		if _, err := e.Acquire(ctx, req); err != nil {
			t.Errorf("acquire b: %v", err)
		}
		answers <- "grant b"
	}()
	inMemory(t, e, func() bool { return len(e.leases["n"].queue()) == 1 })
	stick()
	go func() {
		if err := e.Release(ctx, "n", "a", rec.Token); err != nil {
			t.Errorf("release: %v", err)
		}
		answers <- "release a"
	}()
	inMemory(t, e, func() bool { ent := e.leases["n"]; return ent.held && ent.owner == "b" })
	select {
	case a := <-answers:
		t.Fatalf("%s answered before the handoff's commit was durable", a)
	case <-time.After(300 * time.Millisecond):
	}
	unstick()
	got := []string{<-answers, <-answers}
	slices.Sort(got)
	if !slices.Equal(got, []string{"grant b", "release a"}) {
		t.Fatalf("answers after the commit: %v", got)
	}
}

// TestAsyncAnswersOnlyWhenDurable: AcquireAsync and ReleaseAsync (the
// RESP server's reader starts them itself) return at once while the log
// is stuck, and answer only once what they report is durable: a grant, a
// refusal naming a grant not yet durable, a release. Bad input is
// answered at once and changes nothing.
func TestAsyncAnswersOnlyWhenDurable(t *testing.T) {
	e, stick, unstick := stuckEngine(t)
	ctx := context.Background()
	type answer struct {
		what string
		rec  leasehold.Record
		err  error
	}
	answers := make(chan answer, 8)
	acquire := func(what string, req AcquireRequest) {
		e.AcquireAsync(ctx, req, func(rec leasehold.Record, err error) { answers <- answer{what, rec, err} })
	}
	started := make(chan struct{})
	stick()
	go func() { // on a goroutine so that a call that blocks fails the test instead of hanging it
		defer close(started)
		acquire("a's acquire", pxReq("n", "a", time.Minute))
		acquire("b's acquire", pxReq("n", "b", time.Minute))
		acquire("a bad one", pxReq("", "c", time.Minute))
	}()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("AcquireAsync blocked while the log was stuck")
	}
	if a := <-answers; a.what != "a bad one" || !errors.Is(a.err, leasehold.ErrInvalid) {
		t.Fatalf("first answer: %s: %+v, %v; want the bad request refused at once", a.what, a.rec, a.err)
	}
	select {
	case a := <-answers:
		t.Fatalf("%s answered (%+v, %v) before its state was durable", a.what, a.rec, a.err)
	case <-time.After(300 * time.Millisecond):
	}
	unstick()
	got := map[string]answer{}
	for range 2 {
		a := <-answers
		got[a.what] = a
	}
	granted := got["a's acquire"]
	if granted.err != nil || granted.rec.Owner != "a" || granted.rec.Token == 0 {
		t.Fatalf("a's acquire: %+v, %v", granted.rec, granted.err)
	}
	var he *leasehold.HeldError
	if err := got["b's acquire"].err; !errors.As(err, &he) || he.Owner != "a" || he.Token != granted.rec.Token {
		t.Fatalf("b's acquire: %v; want held by a with token %d", err, granted.rec.Token)
	}

	stick()
	released := make(chan error, 2)
	e.ReleaseAsync(ctx, "n", "a", granted.rec.Token, func(err error) { released <- err })
	// Refused: its "not held" reports the release, not durable yet.
	e.ReleaseAsync(ctx, "n", "a", granted.rec.Token+1, func(err error) { released <- err })
	select {
	case err := <-released:
		t.Fatalf("a release answered (%v) before the release was durable", err)
	case <-time.After(300 * time.Millisecond):
	}
	inMemory(t, e, func() bool { return !e.leases["n"].held })
	unstick()
	if err1, err2 := <-released, <-released; err1 != nil || !errors.Is(err2, leasehold.ErrNotHeld) {
		t.Fatalf("releases: %v and %v; want ok, then not held", err1, err2)
	}
	if _, err := e.Get(ctx, "n"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("Get after the release: %v, want not found", err)
	}
}
