package storetest

// The queue checks: what a store that queues waiters itself
// (leasehold.Queuer) promises beyond a plain Store. Waiters are granted in
// arrival order, across stores opened apart (separate connections, as
// separate processes would have); TryAcquire never takes a free lease
// ahead of a queued waiter; a waiter whose context ends leaves the queue;
// and a waiter that vanishes without cleaning up holds the queue up for at
// most the store's liveness window.
//
// "Arrival" is the moment the engine processed a waiter's enqueue, which a
// client cannot see. The checks start each waiter only once the one before
// is known to be queued: by the harness's Queued (which asks the engine),
// or, without it, once the waiter's AcquireWait has been called, has not
// returned, and QueueSettle has passed. Without Queued, a check whose
// grants come out of order is run once more with four times the settle
// time before it fails, so that a slow enqueue on a loaded machine is not
// taken for a wrong order (a store that reorders does so again).

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// Defaults of the Harness's queue settings.
const (
	DefaultQueueSettle    = 500 * time.Millisecond
	DefaultWaiterLiveness = 10 * time.Second
)

// queueWaiters is how many waiters the FIFO check queues.
const queueWaiters = 6

// handoffBound is how long after the release that frees it a queued
// waiter may take to learn its grant (generous: it is a few milliseconds).
const handoffBound = 10 * time.Second

func (h Harness) queueSettle() time.Duration {
	if h.QueueSettle > 0 {
		return h.QueueSettle
	}
	return DefaultQueueSettle
}

func (h Harness) waiterLiveness() time.Duration {
	if h.WaiterLiveness > 0 {
		return h.WaiterLiveness
	}
	return DefaultWaiterLiveness
}

// queueCheck is one check of a Queuer: it returns the first violation it
// saw, or nil. t is used to open stores, register cleanups and log, never
// to fail, so that the negative controls can call the checks on broken
// stores. settle is how long to wait for a waiter to be queued when the
// harness cannot tell (Queued is nil).
type queueCheck func(t testing.TB, h Harness, settle time.Duration) error

// QueueChecks are the queue checks Run runs, by subtest name, for tests
// that run them on a store of their own (the negative controls).
var queueChecks = []struct {
	name string
	fn   queueCheck
}{
	{"QueueFIFO", checkQueueFIFO},
	{"QueueNoOvertake", checkQueueNoOvertake},
	{"QueueCancelLeaves", checkQueueCancel},
	{"QueueVanishedWaiter", checkQueueVanished},
}

// CheckQueue runs the queue check called name (one of the Queue*
// subtests of Run) on the stores h opens, and returns the violation it
// found, or nil; an error also when the store is not a leasehold.Queuer.
// It is how a test shows that the checks catch a broken queue.
func CheckQueue(t testing.TB, h Harness, name string) error {
	for _, c := range queueChecks {
		if c.name == name {
			return h.runQueueCheck(t, c.fn)
		}
	}
	return fmt.Errorf("storetest: no queue check %q", name)
}

// runQueueCheck runs c, and without Queued, once more with four times the
// settle time if the first run failed.
func (h Harness) runQueueCheck(t testing.TB, c queueCheck) error {
	err := c(t, h, h.queueSettle())
	if err == nil || h.Queued != nil || errors.Is(err, errNotQueuer) {
		return err
	}
	t.Logf("first run: %v; running again with a settle time of %s, in case an enqueue was slow", err, 4*h.queueSettle())
	return c(t, h, 4*h.queueSettle())
}

func testQueue(c queueCheck) func(*testing.T, Harness) {
	return func(t *testing.T, h Harness) {
		s := h.open(t)
		if _, ok := s.(leasehold.Queuer); !ok {
			t.Skip("store does not queue waiters (not a leasehold.Queuer)")
		}
		if err := h.runQueueCheck(t, c); err != nil {
			t.Error(err)
		}
	}
}

var errNotQueuer = errors.New("store is not a leasehold.Queuer")

// queueStores opens n stores for a queue check (closed when t ends). If
// the stores Open returns do not share their leases (an in-process store
// that makes a new one per Open), every client uses the first; distinct
// reports whether each of the n is a store of its own (so that closing one
// leaves the others working).
func queueStores(t testing.TB, h Harness, n int) (stores []leasehold.Store, distinct bool, err error) {
	first := h.Open(t)
	t.Cleanup(func() { first.Close() })
	if _, ok := first.(leasehold.Queuer); !ok {
		return nil, false, errNotQueuer
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	probe := fmt.Sprintf("st/queue-share/%d", time.Now().UnixNano())
	rec, err := first.TryAcquire(ctx, leasehold.AcquireRequest{Name: probe, Owner: "share-probe", TTL: time.Minute})
	if err != nil {
		return nil, false, fmt.Errorf("probe acquire: %w", err)
	}
	defer first.Release(ctx, probe, "share-probe", rec.Token)
	stores, distinct = []leasehold.Store{first}, true
	for len(stores) < n {
		s := h.Open(t)
		if sameStore(s, first) {
			distinct = false
			stores = append(stores, s)
			continue
		}
		got, err := s.Get(ctx, probe)
		if err == nil && got.Token == rec.Token {
			t.Cleanup(func() { s.Close() })
			stores = append(stores, s)
			continue
		}
		s.Close()
		t.Logf("the stores Open returns do not share their leases (Get of another's lease: %+v, %v): every client uses one store", got, err)
		stores, distinct = stores[:1], false
		for len(stores) < n {
			stores = append(stores, first)
		}
	}
	return stores, distinct, nil
}

// sameStore reports whether a and b are the same store value.
func sameStore(a, b leasehold.Store) (same bool) {
	defer func() {
		if recover() != nil { // not comparable: different values
			same = false
		}
	}()
	return a == b
}

// qwaiter is one AcquireWait running in a goroutine of its own.
type qwaiter struct {
	owner   string
	store   leasehold.Store
	cancel  context.CancelFunc
	started chan struct{} // closed just before AcquireWait is called
	done    chan struct{} // closed when it returned
	rec     leasehold.Record
	err     error
}

// grantLog records, in order, the waiters that were granted. A granted
// waiter records itself and then releases, so the record order is the
// grant order.
type grantLog struct {
	mu     sync.Mutex
	owners []string
	tokens []uint64
	errs   []error
}

func (g *grantLog) add(owner string, token uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.owners = append(g.owners, owner)
	g.tokens = append(g.tokens, token)
}

func (g *grantLog) fail(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.errs = append(g.errs, err)
}

func (g *grantLog) snapshot() ([]string, []uint64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.owners...), append([]uint64(nil), g.tokens...), errors.Join(g.errs...)
}

// startWaiter starts owner's AcquireWait of name on s. When granted it
// records the grant in log (if not nil), holds the lease for hold and
// releases it.
func startWaiter(ctx context.Context, s leasehold.Store, name, owner string, ttl, hold time.Duration, log *grantLog) *qwaiter {
	ctx, cancel := context.WithCancel(ctx)
	w := &qwaiter{owner: owner, store: s, cancel: cancel, started: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		close(w.started)
		w.rec, w.err = s.(leasehold.Queuer).AcquireWait(ctx, leasehold.AcquireRequest{Name: name, Owner: owner, RequestID: owner + "-wait", TTL: ttl})
		if w.err != nil || log == nil {
			return
		}
		log.add(owner, w.rec.Token)
		if w.rec.Owner != owner || w.rec.Name != name || w.rec.Token == 0 {
			log.fail(fmt.Errorf("%s's grant is %+v", owner, w.rec))
		}
		time.Sleep(hold)
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer rcancel()
		if err := s.Release(rctx, name, owner, w.rec.Token); err != nil {
			log.fail(fmt.Errorf("%s's release of its grant: %w", owner, err))
		}
	}()
	return w
}

// returned reports whether w's AcquireWait has returned.
func (w *qwaiter) returned() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// await waits up to d for w's AcquireWait to return.
func (w *qwaiter) await(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.done:
		return true
	case <-t.C:
		return false
	}
}

// awaitQueued returns once w is known to wait in the queue of name: the
// harness's Queued says so, or (without Queued) settle has passed since
// its AcquireWait was called. It is an error if w returned meanwhile.
func (h Harness) awaitQueued(ctx context.Context, w *qwaiter, name string, settle time.Duration) error {
	<-w.started
	if h.Queued == nil {
		// A round trip on the waiter's store first, so that a cold
		// connection does not eat the settle time.
		_, _ = w.store.Get(ctx, name)
		if w.await(settle) {
			return fmt.Errorf("%s's AcquireWait returned before the lease was freed: %+v, %v", w.owner, w.rec, w.err)
		}
		return nil
	}
	deadline := time.Now().Add(time.Minute)
	for {
		ok, err := h.Queued(ctx, w.store, name, w.owner)
		if err != nil {
			return fmt.Errorf("Queued(%s): %w", w.owner, err)
		}
		if w.returned() {
			return fmt.Errorf("%s's AcquireWait returned before the lease was freed: %+v, %v", w.owner, w.rec, w.err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not queued a minute after its AcquireWait was called", w.owner)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// queueName is a fresh lease name for a queue check.
func queueName(what string) string {
	return fmt.Sprintf("st/queue/%s/%d", what, time.Now().UnixNano())
}

// queueSetup is how every queue check starts: n stores (queueStores), a
// fresh lease name (queueName(what)), and "holder" holding it for a minute
// on stores[0].
type queueSetup struct {
	stores   []leasehold.Store
	distinct bool
	name     string
	holder   leasehold.Record
}

func openQueueSetup(ctx context.Context, t testing.TB, h Harness, n int, what string) (queueSetup, error) {
	stores, distinct, err := queueStores(t, h, n)
	if err != nil {
		return queueSetup{}, err
	}
	name := queueName(what)
	holder, err := stores[0].TryAcquire(ctx, leasehold.AcquireRequest{Name: name, Owner: "holder", TTL: time.Minute})
	if err != nil {
		return queueSetup{}, fmt.Errorf("holder's acquire: %w", err)
	}
	return queueSetup{stores: stores, distinct: distinct, name: name, holder: holder}, nil
}

// releaseHolder releases the holder's grant.
func (q queueSetup) releaseHolder(ctx context.Context) error {
	if err := q.stores[0].Release(ctx, q.name, "holder", q.holder.Token); err != nil {
		return fmt.Errorf("holder's release: %w", err)
	}
	return nil
}

// queueInArrivalOrder starts a waiter for each of owners, the i-th on
// stores[1+i], each once the one before is queued (awaitQueued); each
// records its grant in log, holds the lease for 5ms and releases it. On an
// error the waiters started are cancelled; otherwise the caller cancels
// them.
func (h Harness) queueInArrivalOrder(ctx context.Context, q queueSetup, owners []string, settle time.Duration, log *grantLog) ([]*qwaiter, error) {
	var ws []*qwaiter
	for i, owner := range owners {
		w := startWaiter(ctx, q.stores[1+i], q.name, owner, time.Minute, 5*time.Millisecond, log)
		ws = append(ws, w)
		if err := h.awaitQueued(ctx, w, q.name, settle); err != nil {
			cancelWaiters(ws)
			return nil, err
		}
	}
	return ws, nil
}

func cancelWaiters(ws []*qwaiter) {
	for _, w := range ws {
		w.cancel()
	}
}

// checkQueueFIFO: a holder, then queueWaiters waiters on stores of their
// own, each started once the one before is queued; the holder releases.
// Every waiter is granted exactly once, in arrival order, with increasing
// tokens.
func checkQueueFIFO(t testing.TB, h Harness, settle time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	q, err := openQueueSetup(ctx, t, h, queueWaiters+1, "fifo")
	if err != nil {
		return err
	}
	stores, n, holder := q.stores, q.name, q.holder
	var want []string
	for i := range queueWaiters {
		want = append(want, fmt.Sprintf("w%d", i+1))
	}
	var log grantLog
	ws, err := h.queueInArrivalOrder(ctx, q, want, settle, &log)
	if err != nil {
		return err
	}
	defer cancelWaiters(ws)
	if err := q.releaseHolder(ctx); err != nil {
		return err
	}
	for _, w := range ws {
		if !w.await(time.Duration(queueWaiters) * handoffBound) {
			got, _, _ := log.snapshot()
			return fmt.Errorf("%s not granted within %s of the holder's release (granted so far, in order: %v)", w.owner, time.Duration(queueWaiters)*handoffBound, got)
		}
		if w.err != nil {
			return fmt.Errorf("%s's AcquireWait: %w", w.owner, w.err)
		}
	}
	// The last one releases after it recorded; wait for that too.
	deadline := time.Now().Add(handoffBound)
	for {
		if _, err := stores[0].Get(ctx, n); errors.Is(err, leasehold.ErrNotFound) || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	got, tokens, err := log.snapshot()
	if err != nil {
		return err
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		return fmt.Errorf("grants in the order %v, want arrival order %v", got, want)
	}
	last := holder.Token
	for i, tok := range tokens {
		if tok <= last {
			return fmt.Errorf("%s's token %d is not above the one before (%d)", got[i], tok, last)
		}
		last = tok
	}
	return nil
}

// checkQueueNoOvertake: a holder and one queued waiter; a prober on a
// store of its own keeps trying the lease while the holder releases. The
// waiter is granted; no try succeeds; a try right after the release is
// refused with a *HeldError naming the waiter.
func checkQueueNoOvertake(t testing.TB, h Harness, settle time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	q, err := openQueueSetup(ctx, t, h, 3, "overtake")
	if err != nil {
		return err
	}
	stores, n, holder := q.stores, q.name, q.holder
	w := startWaiter(ctx, stores[1], n, "waiter", time.Minute, 0, nil)
	defer w.cancel()
	if err := h.awaitQueued(ctx, w, n, settle); err != nil {
		return err
	}
	// The prober tries as fast as it can from before the release until
	// the waiter has its grant.
	probeCtx, stopProbe := context.WithCancel(ctx)
	var overtook []string
	var probeErr error
	tries := 0
	probing := make(chan struct{})
	go func() {
		defer close(probing)
		for i := 0; probeCtx.Err() == nil && !w.returned(); i++ {
			tries++
			rec, err := stores[2].TryAcquire(probeCtx, leasehold.AcquireRequest{Name: n, Owner: "prober", RequestID: fmt.Sprint("try-", i), TTL: time.Minute})
			var he *leasehold.HeldError
			switch {
			case err == nil:
				overtook = append(overtook, fmt.Sprintf("token %d", rec.Token))
				_ = stores[2].Release(context.WithoutCancel(ctx), n, "prober", rec.Token)
			case errors.As(err, &he):
				if he.Owner != "holder" && he.Owner != "waiter" {
					probeErr = fmt.Errorf("a try was refused naming %q/%d, neither the holder nor the waiter", he.Owner, he.Token)
				}
			case probeCtx.Err() == nil:
				probeErr = fmt.Errorf("prober's TryAcquire: %w", err)
			}
			runtime.Gosched()
		}
	}()
	time.Sleep(10 * time.Millisecond) // let the prober start
	if err := q.releaseHolder(ctx); err != nil {
		stopProbe()
		<-probing
		return err
	}
	late, tryErr := stores[0].TryAcquire(ctx, leasehold.AcquireRequest{Name: n, Owner: "late", TTL: time.Minute})
	if tryErr == nil {
		_ = stores[0].Release(ctx, n, "late", late.Token)
		stopProbe()
		<-probing
		return fmt.Errorf("a TryAcquire right after the holder's release was granted (token %d) ahead of the queued waiter", late.Token)
	}
	granted := w.await(handoffBound)
	stopProbe()
	<-probing
	if len(overtook) > 0 {
		return fmt.Errorf("TryAcquire took the lease ahead of the queued waiter (%d of %d tries: %s)", len(overtook), tries, strings.Join(overtook, ", "))
	}
	var he *leasehold.HeldError
	if !errors.As(tryErr, &he) || he.Owner != "waiter" {
		return fmt.Errorf("a TryAcquire right after the holder's release: %v; want a *HeldError naming the waiter", tryErr)
	}
	if !granted {
		return fmt.Errorf("the waiter not granted within %s of the holder's release", handoffBound)
	}
	if w.err != nil {
		return fmt.Errorf("the waiter's AcquireWait: %w", w.err)
	}
	if probeErr != nil {
		return probeErr
	}
	if got, err := stores[2].Get(ctx, n); err != nil || got.Owner != "waiter" || got.Token != w.rec.Token {
		return fmt.Errorf("Get after the handoff = %+v, %v; want the waiter's grant (token %d)", got, err, w.rec.Token)
	}
	if w.rec.Token <= holder.Token {
		return fmt.Errorf("the waiter's token %d is not above the holder's %d", w.rec.Token, holder.Token)
	}
	return stores[1].Release(ctx, n, "waiter", w.rec.Token)
}

// checkQueueCancel: a holder and three queued waiters; the first one's
// context ends, and its AcquireWait returns that error. When the holder
// releases, the other two are granted in order, promptly (the cancelled
// one left no entry to be granted in its stead), and the lease is free
// afterwards.
func checkQueueCancel(t testing.TB, h Harness, settle time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	q, err := openQueueSetup(ctx, t, h, 4, "cancel")
	if err != nil {
		return err
	}
	stores, n := q.stores, q.name
	var log grantLog
	ws, err := h.queueInArrivalOrder(ctx, q, []string{"gone", "w2", "w3"}, settle, &log)
	if err != nil {
		return err
	}
	defer cancelWaiters(ws)
	gone := ws[0]
	gone.cancel()
	if !gone.await(handoffBound) {
		return fmt.Errorf("AcquireWait still waiting %s after its context ended", handoffBound)
	}
	if !errors.Is(gone.err, context.Canceled) {
		return fmt.Errorf("AcquireWait whose context ended: %+v, %v; want context.Canceled", gone.rec, gone.err)
	}
	released := time.Now()
	if err := q.releaseHolder(ctx); err != nil {
		return err
	}
	// w2 is granted next, within the bound: an entry left behind by the
	// cancelled waiter would have taken the grant (held for its minute).
	for _, w := range ws[1:] {
		if !w.await(handoffBound) {
			got, _, _ := log.snapshot()
			cur, gerr := stores[0].Get(ctx, n)
			return fmt.Errorf("%s not granted within %s of the holder's release (granted: %v; the lease: %s/%d, %v): the cancelled waiter's entry blocks the queue?",
				w.owner, time.Since(released).Round(time.Millisecond), got, cur.Owner, cur.Token, gerr)
		}
		if w.err != nil {
			return fmt.Errorf("%s's AcquireWait: %w", w.owner, w.err)
		}
	}
	got, _, err := log.snapshot()
	if err != nil {
		return err
	}
	if strings.Join(got, ",") != "w2,w3" {
		return fmt.Errorf("grants %v after the first waiter left, want [w2 w3]", got)
	}
	// Once w3 released, the lease is free for anyone.
	return eventuallyFree(ctx, stores[0], n, handoffBound)
}

// eventuallyFree checks that a TryAcquire of n succeeds within bound
// (while a waiter's release is in flight it may be refused).
func eventuallyFree(ctx context.Context, s leasehold.Store, n string, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for {
		rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: n, Owner: "after", TTL: time.Minute})
		if err == nil {
			return s.Release(ctx, n, "after", rec.Token)
		}
		if !errors.Is(err, leasehold.ErrHeld) || time.Now().After(deadline) {
			return fmt.Errorf("TryAcquire after every waiter was served: %v (for %s)", err, bound)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkQueueVanished: a holder and two queued waiters; the first one's
// store is abandoned (Harness.Abandon, default Close) without its context
// ending. When the holder releases, the second waiter is granted within
// the store's liveness window plus the vanished waiter's TTL (a grant the
// store made to the vanished waiter before it noticed runs out by then).
func checkQueueVanished(t testing.TB, h Harness, settle time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	q, err := openQueueSetup(ctx, t, h, 3, "vanish")
	if err != nil {
		return err
	}
	stores, distinct, n := q.stores, q.distinct, q.name
	if !distinct {
		t.Logf("Open does not return stores of their own: the vanishing waiter's context is cancelled instead of its store closed")
	}
	goneTTL := max(2*h.ttl(), time.Second)
	gone := startWaiter(ctx, stores[1], n, "gone", goneTTL, 0, nil)
	defer gone.cancel()
	if err := h.awaitQueued(ctx, gone, n, settle); err != nil {
		return err
	}
	var log grantLog
	next := startWaiter(ctx, stores[2], n, "next", time.Minute, 0, &log)
	defer next.cancel()
	if err := h.awaitQueued(ctx, next, n, settle); err != nil {
		return err
	}
	switch {
	case !distinct:
		gone.cancel()
	case h.Abandon != nil:
		h.Abandon(stores[1])
	default:
		stores[1].Close()
	}
	released := time.Now()
	if err := q.releaseHolder(ctx); err != nil {
		return err
	}
	bound := h.waiterLiveness() + goneTTL + handoffBound
	if !next.await(bound) {
		return fmt.Errorf("the waiter behind a vanished one not granted within %s of the holder's release (liveness window %s + the vanished waiter's TTL %s + %s)",
			bound, h.waiterLiveness(), goneTTL, handoffBound)
	}
	if next.err != nil {
		return fmt.Errorf("the waiter behind a vanished one: %w", next.err)
	}
	t.Logf("the waiter behind a vanished one was granted %s after the holder's release", time.Since(released).Round(time.Millisecond))
	if _, _, err := log.snapshot(); err != nil {
		return err
	}
	return eventuallyFree(ctx, stores[0], n, bound)
}
