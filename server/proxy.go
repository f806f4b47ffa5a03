package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
)

// ProxyConfig configures a Proxy. The zero value is usable.
type ProxyConfig struct {
	// Clock times waits, sessions and events. Default: clock.Real().
	// Lease expiry is still judged by the store's own clock.
	Clock clock.Clock
	// Hooks receive every event. They are called synchronously, in event
	// order, and must not call back into the Proxy.
	Hooks  Hooks
	Logger *slog.Logger // default: discard
	// RecentEvents is the size of the ring kept for Recent. Default 256.
	RecentEvents int
	// Durable is reported in Stats: whether the store behind the proxy keeps
	// acknowledged grants across a crash. The caller knows its engine.
	Durable bool
	// HeldRefresh is how often, at most, Stats recounts the live leases
	// with a List of the whole store (lazily, in the background, only
	// when Stats is called). Between recounts Held is adjusted by the
	// grants and releases made through this proxy. Default 5s.
	HeldRefresh time.Duration
	// BackoffMin and BackoffMax bound the jittered exponential backoff of
	// a waiter on a store that is not a leasehold.Watcher (and after
	// transient errors). Defaults 2ms and 250ms.
	BackoffMin, BackoffMax time.Duration
}

// Proxy is a Backend in front of any leasehold.Store: several server
// instances can share one distributed engine (PostgreSQL, Redis, DynamoDB,
// etcd, SQLite). The store stays the single authority on who holds what;
// the proxy adds what only a server can:
//
//   - FIFO wait queues. Waiters on one name are served in arrival order
//     among the waiters of this proxy instance: only the head of the queue
//     tries the store, on the store's push notification (leasehold.Watcher)
//     or with jittered capped backoff, never sleeping past the holder's
//     remaining time. Waiters on other instances (and other clients of the
//     store) compete with the head through the engine, so in proxy mode
//     FIFO order holds per server instance, not across instances.
//     Acquire without Wait is a plain TryAcquire and does not queue.
//   - Sessions. A lease acquired with a session is renewed on the store by
//     the proxy (every third of its TTL, with its own TTL; a request TTL of
//     zero takes the session's) while the session lives, and released when
//     the session is closed or expires (by the proxy's Clock). A Renew of
//     such a lease sets the TTL the proxy renews it with and, as with the
//     Engine, keeps the session alive; once the session has expired or
//     ended, a Renew of its lease is refused with ErrNotHeld (the proxy is
//     releasing it), as the Engine refuses it. Sessions live in this proxy's
//     memory: they end, and their leases are released, when the proxy is
//     closed; a proxy that crashes leaves them to expire by their TTL on
//     the store, which is why that TTL is kept rather than ignored.
//   - Events for the changes made through this proxy. The internal
//     renewals of session leases are not reported (the session covers
//     them, as with the Engine). A release reported by the store as done
//     is reported as released even when it was a repeat of an earlier one:
//     the store interface does not say which.
type Proxy struct {
	store   leasehold.Store
	watcher leasehold.Watcher
	clock   clock.Clock
	hooks   Hooks
	log     *slog.Logger
	cfg     ProxyConfig

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	done   chan struct{} // closed at Close
	wg     sync.WaitGroup

	mu           sync.Mutex
	closed       bool
	names        map[string]*proxyName
	waiting      int // queued waiters, all names
	sessions     map[string]*proxySession
	leaseSession map[proxyLeaseKey]*proxySession
	heldAt       time.Time // last recount of Held
	heldBusy     bool      // a recount is running

	held atomic.Int64 // estimate of live leases

	// evMu orders event delivery (hub and hooks) as the changes were
	// ordered under mu. Lock order: mu, then evMu.
	evMu sync.Mutex
	hub  *hub
}

var _ Backend = (*Proxy)(nil)

// proxyName is the proxy's state for one lease name: its wait queue and a
// lock that orders this proxy's changes to the name with their events.
// It exists while an operation or a waiter refers to it.
type proxyName struct {
	name  string
	sem   chan struct{} // capacity 1: held across a store change and its event
	refs  int
	queue []*proxyWaiter

	// The latest holder seen (from a refusal or a grant), for waiters
	// whose Wait runs out before they reach the head.
	lastHeld   *leasehold.HeldError
	lastHeldAt time.Time
	releasedAt time.Time // latest release through this proxy
}

func (ns *proxyName) lock(ctx context.Context) error {
	select {
	case ns.sem <- struct{}{}:
		return nil
	default:
	}
	select {
	case ns.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (ns *proxyName) unlock() { <-ns.sem }

type proxyWaiter struct {
	owner, session string
	since          time.Time
	turn           chan struct{} // closed when the waiter becomes head
}

type proxyLeaseKey struct {
	name  string
	token uint64
}

type proxySession struct {
	id      string
	ttl     time.Duration
	expires time.Time // by the proxy's clock
	leases  map[proxyLeaseKey]*proxySessionLease
	// timer wakes the renewal loop at timerAt: the earliest renewal or the
	// expiry. It is re-armed under mu by whoever makes that earlier (attach,
	// or the loop itself); kick tells a sleeping loop to wait on the new one.
	timer   clock.Timer
	timerAt time.Time
	kick    chan struct{}
	done    chan struct{} // closed when the session ends
	ended   bool
}

type proxySessionLease struct {
	name, owner string
	token       uint64
	ttl         time.Duration
	renewAt     time.Time
}

// NewProxy returns a Backend in front of store. The proxy owns the store:
// Close closes it.
func NewProxy(store leasehold.Store, cfg ProxyConfig) *Proxy {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.RecentEvents <= 0 {
		cfg.RecentEvents = 256
	}
	if cfg.HeldRefresh <= 0 {
		cfg.HeldRefresh = 5 * time.Second
	}
	if cfg.BackoffMin <= 0 {
		cfg.BackoffMin = 2 * time.Millisecond
	}
	if cfg.BackoffMax < cfg.BackoffMin {
		cfg.BackoffMax = max(250*time.Millisecond, cfg.BackoffMin)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		store: store, clock: cfg.Clock, hooks: cfg.Hooks, log: cfg.Logger, cfg: cfg,
		ctx: ctx, cancel: cancel, done: make(chan struct{}),
		names: map[string]*proxyName{}, sessions: map[string]*proxySession{},
		leaseSession: map[proxyLeaseKey]*proxySession{},
		hub:          newHub(cfg.RecentEvents),
	}
	if w, ok := store.(leasehold.Watcher); ok {
		p.watcher = w
	}
	return p
}

// ref returns the state of name, creating it, and counts a reference.
func (p *Proxy) ref(name string) *proxyName {
	p.mu.Lock()
	defer p.mu.Unlock()
	ns := p.names[name]
	if ns == nil {
		ns = &proxyName{name: name, sem: make(chan struct{}, 1)}
		p.names[name] = ns
	}
	ns.refs++
	return ns
}

func (p *Proxy) unref(ns *proxyName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ns.refs--
	if ns.refs == 0 && len(ns.queue) == 0 {
		delete(p.names, ns.name)
	}
}

// --- events ---

// emitUnlock publishes ev. It is called with p.mu held and unlocks it; the
// event's Waiters is the queue length at that moment.
func (p *Proxy) emitUnlock(ev Event) {
	if ev.Time.IsZero() {
		ev.Time = p.clock.Now()
	}
	if ns := p.names[ev.Name]; ns != nil {
		ev.Waiters = len(ns.queue)
	}
	p.evMu.Lock()
	p.mu.Unlock()
	defer p.evMu.Unlock()
	p.hub.publish(ev)
	if p.hooks.Event != nil {
		p.hooks.Event(ev)
	}
}

func (p *Proxy) emit(ev Event) {
	p.mu.Lock()
	p.emitUnlock(ev)
}

// Subscribe implements Backend (through the package's event hub, as the
// Engine does).
func (p *Proxy) Subscribe(ctx context.Context, prefix string) <-chan Event {
	return p.hub.subscribe(ctx, prefix)
}

// Recent implements Backend.
func (p *Proxy) Recent(n int) []Event { return p.hub.recent(n) }

// --- acquire and the wait queue ---

func invalidf(field, reason string) error {
	return &leasehold.InvalidError{Field: field, Reason: reason}
}

// Acquire implements Backend. Without Wait it is one TryAcquire on the
// store (it does not queue, and so may overtake queued waiters when the
// lease is free). With Wait it queues behind this proxy's earlier waiters
// on the name.
func (p *Proxy) Acquire(ctx context.Context, req AcquireRequest) (leasehold.Record, error) {
	r := req.AcquireRequest
	for _, err := range []error{
		leasehold.ValidateName(r.Name), leasehold.ValidateOwner(r.Owner),
		leasehold.ValidateRequestID(r.RequestID), leasehold.ValidateData(r.Data),
	} {
		if err != nil {
			return leasehold.Record{}, err
		}
	}
	if req.Wait < 0 {
		return leasehold.Record{}, invalidf("wait", req.Wait.String()+" is negative")
	}
	var sess *proxySession
	if req.Session != "" {
		p.mu.Lock()
		sess = p.liveSessionLocked(req.Session)
		p.mu.Unlock()
		if sess == nil {
			return leasehold.Record{}, ErrNoSession
		}
		if r.TTL == 0 {
			r.TTL = sess.ttl
		}
	}
	if err := leasehold.ValidateTTL(r.TTL); err != nil {
		return leasehold.Record{}, err
	}
	if p.isClosed() {
		return leasehold.Record{}, leasehold.ErrClosed
	}
	ns := p.ref(r.Name)
	defer p.unref(ns)
	if req.Wait == 0 {
		rec, t0, err := p.try(ctx, ns, r, nil, nil)
		if err != nil {
			return leasehold.Record{}, err
		}
		return p.attach(sess, rec, r.TTL, t0)
	}
	if r.RequestID == "" {
		// One id for all attempts: a lost reply is recognised, and a grant
		// that races with cancellation can be found and released.
		r.RequestID = proxyRandomHex(12)
	}
	return p.wait(ctx, ns, r, req, sess)
}

func (p *Proxy) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// try makes one TryAcquire under the name's lock and reports a grant. w, if
// set, is the queued waiter making the attempt: on a grant it leaves the
// queue and the next waiter becomes head at once; handoff (called with
// p.mu held) gives the grant's Handoff. t0 is the clock before the request.
func (p *Proxy) try(ctx context.Context, ns *proxyName, req leasehold.AcquireRequest, w *proxyWaiter, handoff func(now time.Time) time.Duration) (leasehold.Record, time.Time, error) {
	if err := ns.lock(ctx); err != nil {
		return leasehold.Record{}, time.Time{}, err
	}
	defer ns.unlock()
	t0 := p.clock.Now()
	rec, err := p.store.TryAcquire(ctx, req)
	if err != nil {
		var held *leasehold.HeldError
		if errors.As(err, &held) {
			p.mu.Lock()
			ns.lastHeld, ns.lastHeldAt = held, p.clock.Now()
			p.mu.Unlock()
		}
		return rec, t0, err
	}
	p.held.Add(1)
	p.mu.Lock()
	now := p.clock.Now()
	ev := Event{Type: EventGranted, Name: rec.Name, Owner: rec.Owner, Token: rec.Token, Time: now}
	if w != nil {
		p.removeWaiterLocked(ns, w)
		if handoff != nil {
			ev.Handoff = handoff(now)
		}
	}
	ns.lastHeld, ns.lastHeldAt = proxyHeld(rec), now
	p.emitUnlock(ev)
	return rec, t0, nil
}

func proxyHeld(rec leasehold.Record) *leasehold.HeldError {
	return &leasehold.HeldError{Name: rec.Name, Owner: rec.Owner, Token: rec.Token, Remaining: rec.Remaining, Acquired: rec.Acquired}
}

// enqueue appends w to the name's queue; if it is alone it is head at once.
func (p *Proxy) enqueue(ns *proxyName, w *proxyWaiter) {
	p.mu.Lock()
	ns.queue = append(ns.queue, w)
	p.waiting++
	if len(ns.queue) == 1 {
		close(w.turn)
	}
	p.emitUnlock(Event{Type: EventQueued, Name: ns.name, Owner: w.owner})
}

// removeWaiterLocked takes w out of the queue (if it is there) and makes
// the next waiter head if w was.
func (p *Proxy) removeWaiterLocked(ns *proxyName, w *proxyWaiter) bool {
	for i, o := range ns.queue {
		if o != w {
			continue
		}
		ns.queue = append(ns.queue[:i], ns.queue[i+1:]...)
		p.waiting--
		if i == 0 && len(ns.queue) > 0 {
			close(ns.queue[0].turn)
		}
		return true
	}
	return false
}

// leave drops w from the queue without a grant.
func (p *Proxy) leave(ns *proxyName, w *proxyWaiter) {
	p.mu.Lock()
	if !p.removeWaiterLocked(ns, w) {
		p.mu.Unlock()
		return
	}
	p.emitUnlock(Event{Type: EventDequeued, Name: ns.name, Owner: w.owner})
}

// wait is Acquire with Wait > 0.
func (p *Proxy) wait(ctx context.Context, ns *proxyName, r leasehold.AcquireRequest, req AcquireRequest, sess *proxySession) (leasehold.Record, error) {
	waitEnd := p.clock.NewTimer(req.Wait)
	defer waitEnd.Stop()
	var sessDone <-chan struct{}
	if sess != nil {
		sessDone = sess.done
	}

	// Nobody queued here: try at once, without joining the queue.
	p.mu.Lock()
	empty := len(ns.queue) == 0
	p.mu.Unlock()
	var lastErr error
	if empty {
		rec, t0, err := p.try(ctx, ns, r, nil, nil)
		if err == nil {
			return p.finishWait(ctx, sess, rec, r, t0)
		}
		if e := p.tryFailed(ctx, r, err); e != nil {
			return leasehold.Record{}, e
		}
		lastErr = err
	}

	w := &proxyWaiter{owner: r.Owner, session: req.Session, since: p.clock.Now(), turn: make(chan struct{})}
	p.enqueue(ns, w)
	granted := false
	defer func() {
		if !granted {
			p.leave(ns, w)
		}
	}()

	select {
	case <-w.turn:
	case <-ctx.Done():
		return leasehold.Record{}, ctx.Err()
	case <-waitEnd.C():
		return p.timedOut(ctx, ns, r, sess, lastErr)
	case <-p.done:
		return leasehold.Record{}, leasehold.ErrClosed
	case <-sessDone:
		return leasehold.Record{}, ErrNoSession
	}

	// Head of the queue: only this waiter tries the store.
	var notify <-chan struct{}
	if p.watcher != nil {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		if ch, err := p.watcher.Watch(wctx, r.Name); err == nil {
			notify = ch
		} else {
			p.log.Warn("leasehold proxy: watch failed, polling instead", "name", r.Name, "err", err)
		}
	}
	bo := proxyBackoff{cur: p.cfg.BackoffMin, max: p.cfg.BackoffMax}
	var seenHeldAt, notifyAt, expiryAt time.Time
	handoff := func(now time.Time) time.Duration { // p.mu held
		from := w.since
		if !seenHeldAt.IsZero() {
			from = seenHeldAt
		}
		switch {
		case ns.releasedAt.After(from):
			from = ns.releasedAt
		case notifyAt.After(from):
			from = notifyAt
		case !expiryAt.IsZero() && expiryAt.After(from) && !expiryAt.After(now):
			from = expiryAt
		}
		return max(now.Sub(from), 0)
	}
	for {
		rec, t0, err := p.try(ctx, ns, r, w, handoff)
		if err == nil {
			granted = true
			return p.finishWait(ctx, sess, rec, r, t0)
		}
		if e := p.tryFailed(ctx, r, err); e != nil {
			return leasehold.Record{}, e
		}
		lastErr = err
		var wait time.Duration
		var held *leasehold.HeldError
		if errors.As(err, &held) {
			now := p.clock.Now()
			seenHeldAt, expiryAt = now, now.Add(held.Remaining)
			until := held.Remaining + time.Millisecond
			if notify != nil {
				wait = until // a release arrives by push; expiry by this timer
			} else {
				wait = min(bo.next(), until)
			}
		} else {
			p.log.Warn("leasehold proxy: acquire failed, retrying", "name", r.Name, "err", err)
			wait = bo.next()
		}
		t := p.clock.NewTimer(max(wait, 0))
		select {
		case <-t.C():
		case _, ok := <-notify:
			t.Stop()
			if !ok {
				notify = nil // the watch ended (store closing): poll
			} else {
				notifyAt = p.clock.Now()
			}
		case <-ctx.Done():
			t.Stop()
			return leasehold.Record{}, ctx.Err()
		case <-waitEnd.C():
			t.Stop()
			return p.timedOut(ctx, ns, r, sess, lastErr)
		case <-p.done:
			t.Stop()
			return leasehold.Record{}, leasehold.ErrClosed
		case <-sessDone:
			t.Stop()
			return leasehold.Record{}, ErrNoSession
		}
	}
}

// tryFailed decides what a failed attempt of a waiting acquire means: nil
// to keep waiting, or the error to return. When ctx ended with the
// attempt's outcome unknown, a grant it may have made is released.
func (p *Proxy) tryFailed(ctx context.Context, r leasehold.AcquireRequest, err error) error {
	switch {
	case errors.Is(err, leasehold.ErrHeld):
		return nil
	case ctx.Err() != nil:
		if !errors.Is(err, leasehold.ErrInvalid) && !errors.Is(err, leasehold.ErrClosed) {
			p.reclaim(r)
		}
		return ctx.Err()
	case errors.Is(err, leasehold.ErrInvalid), errors.Is(err, leasehold.ErrClosed):
		return err
	}
	return nil // transient: retry with the same request id
}

// reclaim releases a grant that an attempt cut short by its context may
// have made: if the live lease belongs to r.Owner, a retry with the same
// request id returns our grant (and nobody else's), which is released.
func (p *Proxy) reclaim(r leasehold.AcquireRequest) {
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	rec, err := p.store.Get(ctx, r.Name)
	if err != nil || rec.Owner != r.Owner {
		return
	}
	rec, err = p.store.TryAcquire(ctx, r)
	if err != nil {
		return
	}
	p.held.Add(1)
	p.releaseGrant(rec.Name, rec.Owner, rec.Token, EventReleased)
}

// finishWait completes a waiting acquire's grant: released again if ctx
// ended meanwhile (the caller is gone), attached to its session otherwise.
func (p *Proxy) finishWait(ctx context.Context, sess *proxySession, rec leasehold.Record, r leasehold.AcquireRequest, t0 time.Time) (leasehold.Record, error) {
	if err := ctx.Err(); err != nil {
		p.releaseGrant(rec.Name, rec.Owner, rec.Token, EventReleased)
		return leasehold.Record{}, err
	}
	return p.attach(sess, rec, r.TTL, t0)
}

// timedOut returns what a waiter whose Wait elapsed gets: the latest
// holder seen on the name, as a *HeldError with its remaining time brought
// up to date. With no holder seen yet it reads the store; if the lease is
// then free it makes one last attempt.
func (p *Proxy) timedOut(ctx context.Context, ns *proxyName, r leasehold.AcquireRequest, sess *proxySession, lastErr error) (leasehold.Record, error) {
	p.mu.Lock()
	held, at := ns.lastHeld, ns.lastHeldAt
	now := p.clock.Now()
	p.mu.Unlock()
	if held != nil {
		h := *held
		h.Remaining = max(h.Remaining-now.Sub(at), 0)
		return leasehold.Record{}, &h
	}
	rec, err := p.store.Get(ctx, r.Name)
	switch {
	case err == nil:
		return leasehold.Record{}, proxyHeld(rec)
	case errors.Is(err, leasehold.ErrNotFound):
		rec, t0, err := p.try(ctx, ns, r, nil, nil)
		if err != nil {
			return leasehold.Record{}, err
		}
		return p.finishWait(ctx, sess, rec, r, t0)
	case lastErr != nil:
		return leasehold.Record{}, lastErr
	}
	return leasehold.Record{}, err
}

// Waiters implements Backend.
func (p *Proxy) Waiters(name string) []Waiter {
	p.mu.Lock()
	defer p.mu.Unlock()
	ns := p.names[name]
	if ns == nil || len(ns.queue) == 0 {
		return nil
	}
	now := p.clock.Now()
	out := make([]Waiter, len(ns.queue))
	for i, w := range ns.queue {
		out[i] = Waiter{Owner: w.owner, Session: w.session, Since: w.since, Waited: max(now.Sub(w.since), 0)}
	}
	return out
}

// --- pass-through operations ---

// Renew implements Backend.
func (p *Proxy) Renew(ctx context.Context, name, owner string, token uint64, ttl time.Duration) error {
	if err := leasehold.ValidateHolder(name, owner, token); err != nil {
		return err
	}
	if err := leasehold.ValidateTTL(ttl); err != nil {
		return err
	}
	ns := p.ref(name)
	defer p.unref(ns)
	if err := ns.lock(ctx); err != nil {
		return err
	}
	defer ns.unlock()
	p.mu.Lock()
	s := p.leaseSession[proxyLeaseKey{name, token}]
	ended := s != nil && (s.ended || !p.clock.Now().Before(s.expires))
	p.mu.Unlock()
	if ended {
		// Its session has expired or ended, and the proxy frees (or has
		// just freed) the lease on the store: as with the Engine, it is
		// not held any more, and a renewal must not say otherwise.
		return leasehold.ErrNotHeld
	}
	t0 := p.clock.Now()
	if err := p.store.Renew(ctx, name, owner, token, ttl); err != nil {
		return err
	}
	p.mu.Lock()
	if s != nil && (s.ended || !p.clock.Now().Before(s.expires)) {
		// The session expired or ended while the store renewed: the
		// session loop frees the lease, so the renewal cannot be
		// confirmed.
		p.mu.Unlock()
		return leasehold.ErrNotHeld
	}
	if s := p.leaseSession[proxyLeaseKey{name, token}]; s != nil {
		// A session lease: the proxy renews it with this TTL from now on,
		// and (as with the Engine) its holder's renewal keeps the session
		// alive.
		l := s.leases[proxyLeaseKey{name, token}]
		l.ttl, l.renewAt = ttl, t0.Add(ttl/3)
		s.expires = p.clock.Now().Add(s.ttl)
		p.armLocked(s)
	}
	p.emitUnlock(Event{Type: EventRenewed, Name: name, Owner: owner, Token: token})
	return nil
}

// Release implements Backend.
func (p *Proxy) Release(ctx context.Context, name, owner string, token uint64) error {
	if err := leasehold.ValidateHolder(name, owner, token); err != nil {
		return err
	}
	return p.release(ctx, name, owner, token, EventReleased)
}

// release frees a grant on the store under the name's lock, detaches it
// from its session and reports it as typ.
func (p *Proxy) release(ctx context.Context, name, owner string, token uint64, typ EventType) error {
	ns := p.ref(name)
	defer p.unref(ns)
	if err := ns.lock(ctx); err != nil {
		return err
	}
	defer ns.unlock()
	if err := p.store.Release(ctx, name, owner, token); err != nil {
		return err
	}
	p.held.Add(-1)
	p.mu.Lock()
	p.detachLocked(proxyLeaseKey{name, token})
	now := p.clock.Now()
	ns.releasedAt = now
	p.emitUnlock(Event{Type: typ, Name: name, Owner: owner, Token: token, Time: now})
	return nil
}

// releaseGrant releases a grant the proxy itself is giving up, whatever the
// caller's context, and logs a failure.
func (p *Proxy) releaseGrant(name, owner string, token uint64, typ EventType) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := p.release(ctx, name, owner, token, typ)
	if err != nil && !errors.Is(err, leasehold.ErrNotHeld) {
		p.log.Warn("leasehold proxy: release failed; the lease expires by its TTL",
			"name", name, "owner", owner, "token", token, "err", err)
	}
}

// ForceRelease implements Backend.
func (p *Proxy) ForceRelease(ctx context.Context, name string) (leasehold.Record, error) {
	if err := leasehold.ValidateName(name); err != nil {
		return leasehold.Record{}, err
	}
	for attempt := 0; ; attempt++ {
		rec, err := p.store.Get(ctx, name)
		if err != nil {
			return leasehold.Record{}, err
		}
		err = p.release(ctx, name, rec.Owner, rec.Token, EventForced)
		if err == nil {
			return rec, nil
		}
		// ErrNotHeld: the grant ended (and maybe another began) between
		// the read and the release; look again.
		if !errors.Is(err, leasehold.ErrNotHeld) || attempt == 4 {
			return leasehold.Record{}, err
		}
	}
}

// Get implements Backend.
func (p *Proxy) Get(ctx context.Context, name string) (leasehold.Record, error) {
	if err := leasehold.ValidateName(name); err != nil {
		return leasehold.Record{}, err
	}
	return p.store.Get(ctx, name)
}

// List implements Backend.
func (p *Proxy) List(ctx context.Context, prefix string) ([]leasehold.Record, error) {
	if err := leasehold.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	return p.store.List(ctx, prefix)
}

// proxyReadyName is read by Ready; it need not exist.
const proxyReadyName = "leasehold/readyz"

// Ready implements Backend: one Get on the store.
func (p *Proxy) Ready(ctx context.Context) error {
	if p.isClosed() {
		return leasehold.ErrClosed
	}
	_, err := p.store.Get(ctx, proxyReadyName)
	if err == nil || errors.Is(err, leasehold.ErrNotFound) {
		return nil
	}
	return err
}

// Stats implements Backend. Held is an estimate: a count of the store's
// live leases (List of everything) taken at most every HeldRefresh, in
// the background, adjusted by this proxy's grants and releases since.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	st := Stats{Waiters: p.waiting, Sessions: len(p.sessions), Durable: p.cfg.Durable}
	now := p.clock.Now()
	if !p.closed && !p.heldBusy && (p.heldAt.IsZero() || now.Sub(p.heldAt) >= p.cfg.HeldRefresh) {
		p.heldBusy = true
		p.wg.Add(1)
		go p.recountHeld()
	}
	p.mu.Unlock()
	st.Held = int(max(p.held.Load(), 0))
	return st
}

func (p *Proxy) recountHeld() {
	defer p.wg.Done()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	recs, err := p.store.List(ctx, "")
	p.mu.Lock()
	defer p.mu.Unlock()
	p.heldBusy = false
	p.heldAt = p.clock.Now()
	if err != nil {
		p.log.Warn("leasehold proxy: counting leases failed", "err", err)
		return
	}
	p.held.Store(int64(len(recs)))
}

// --- sessions ---

// liveSessionLocked returns the session if it is open and unexpired.
func (p *Proxy) liveSessionLocked(id string) *proxySession {
	s := p.sessions[id]
	if s == nil || s.ended || !p.clock.Now().Before(s.expires) {
		return nil
	}
	return s
}

// OpenSession implements Backend.
func (p *Proxy) OpenSession(ctx context.Context, ttl time.Duration) (Session, error) {
	if err := leasehold.ValidateTTL(ttl); err != nil {
		return Session{}, err
	}
	s := &proxySession{
		id: proxyRandomHex(16), ttl: ttl, leases: map[proxyLeaseKey]*proxySessionLease{},
		kick: make(chan struct{}, 1), done: make(chan struct{}),
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return Session{}, leasehold.ErrClosed
	}
	s.expires = p.clock.Now().Add(ttl)
	p.sessions[s.id] = s
	p.wg.Add(1)
	go p.sessionLoop(s)
	return Session{ID: s.id, TTL: ttl, Remaining: ttl}, nil
}

// KeepAlive implements Backend: the session lives for its TTL from now.
func (p *Proxy) KeepAlive(ctx context.Context, id string) (Session, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return Session{}, leasehold.ErrClosed
	}
	s := p.liveSessionLocked(id)
	if s == nil {
		return Session{}, ErrNoSession
	}
	s.expires = p.clock.Now().Add(s.ttl)
	return Session{ID: s.id, TTL: s.ttl, Remaining: s.ttl, Leases: len(s.leases)}, nil
}

// CloseSession implements Backend. The session's leases are released on
// the store before it returns.
func (p *Proxy) CloseSession(ctx context.Context, id string) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return leasehold.ErrClosed
	}
	s := p.liveSessionLocked(id)
	if s == nil {
		p.mu.Unlock()
		return ErrNoSession
	}
	leases := p.endSessionLocked(s)
	p.mu.Unlock()
	p.releaseLeases(leases, EventReleased)
	return nil
}

// attach ties a grant to its session (when it has one); if the session
// expired or ended meanwhile the grant is released and ErrNoSession
// returned (the Engine checks the session and grants in one step).
func (p *Proxy) attach(s *proxySession, rec leasehold.Record, ttl time.Duration, t0 time.Time) (leasehold.Record, error) {
	if s == nil {
		return rec, nil
	}
	p.mu.Lock()
	if s.ended || !p.clock.Now().Before(s.expires) {
		p.mu.Unlock()
		p.releaseGrant(rec.Name, rec.Owner, rec.Token, EventReleased)
		return leasehold.Record{}, ErrNoSession
	}
	k := proxyLeaseKey{rec.Name, rec.Token}
	s.leases[k] = &proxySessionLease{name: rec.Name, owner: rec.Owner, token: rec.Token, ttl: ttl, renewAt: t0.Add(ttl / 3)}
	p.leaseSession[k] = s
	p.armLocked(s)
	p.mu.Unlock()
	return rec, nil
}

// armLocked makes s.timer fire at the session's next renewal or expiry,
// replacing a timer set for another time. p.mu held.
func (p *Proxy) armLocked(s *proxySession) {
	next := s.expires
	for _, l := range s.leases {
		if l.renewAt.Before(next) {
			next = l.renewAt
		}
	}
	if s.timer != nil && s.timerAt.Equal(next) {
		return
	}
	if s.timer != nil {
		s.timer.Stop()
	}
	s.timer, s.timerAt = p.clock.NewTimer(max(next.Sub(p.clock.Now()), 0)), next
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (p *Proxy) detachLocked(k proxyLeaseKey) {
	if s := p.leaseSession[k]; s != nil {
		delete(s.leases, k)
		delete(p.leaseSession, k)
	}
}

// endSessionLocked ends s and returns the leases to release. The leases stay
// known as s's (ended) until their release is done, so that a renewal that
// comes meanwhile is refused.
func (p *Proxy) endSessionLocked(s *proxySession) []*proxySessionLease {
	s.ended = true
	delete(p.sessions, s.id)
	close(s.done)
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	out := make([]*proxySessionLease, 0, len(s.leases))
	for _, l := range s.leases {
		out = append(out, l)
	}
	s.leases = nil
	return out
}

// releaseLeases releases the leases of ended sessions. A lease whose
// release failed is forgotten too: it stays on the store until its own TTL
// runs out, unless its holder renews it there.
func (p *Proxy) releaseLeases(leases []*proxySessionLease, typ EventType) {
	for _, l := range leases {
		p.releaseGrant(l.name, l.owner, l.token, typ)
		k := proxyLeaseKey{l.name, l.token}
		p.mu.Lock()
		if s := p.leaseSession[k]; s != nil && s.ended {
			delete(p.leaseSession, k)
		}
		p.mu.Unlock()
	}
}

// sessionLoop renews the session's leases on the store, each at a third of
// its TTL, and ends the session when it expires (by the proxy's clock).
func (p *Proxy) sessionLoop(s *proxySession) {
	defer p.wg.Done()
	var fired clock.Timer // the timer that woke the loop, now spent
	for {
		p.mu.Lock()
		if s.ended {
			p.mu.Unlock()
			return
		}
		if fired != nil && s.timer == fired {
			s.timer = nil
		}
		fired = nil
		now := p.clock.Now()
		if !now.Before(s.expires) {
			leases := p.endSessionLocked(s)
			p.mu.Unlock()
			p.log.Info("leasehold proxy: session expired", "session", s.id, "leases", len(leases))
			p.releaseLeases(leases, EventExpired)
			return
		}
		var due []proxySessionLease
		for _, l := range s.leases {
			if !l.renewAt.After(now) {
				due = append(due, *l)
			}
		}
		var t clock.Timer
		if len(due) == 0 {
			p.armLocked(s)
			t = s.timer
			select { // this timer is the current one: a pending kick is stale
			case <-s.kick:
			default:
			}
		}
		p.mu.Unlock()
		if len(due) > 0 {
			p.renewSessionLeases(s, due)
			continue
		}
		select {
		case <-t.C():
			fired = t
		case <-s.kick:
		case <-s.done:
			return
		}
	}
}

func (p *Proxy) renewSessionLeases(s *proxySession, due []proxySessionLease) {
	for _, l := range due {
		p.mu.Lock()
		over := s.ended || !p.clock.Now().Before(s.expires)
		p.mu.Unlock()
		if over {
			return // the loop ends the session and releases its leases
		}
		t0 := p.clock.Now()
		ctx, cancel := context.WithTimeout(p.ctx, max(l.ttl/3, time.Second))
		err := p.store.Renew(ctx, l.name, l.owner, l.token, l.ttl)
		cancel()
		k := proxyLeaseKey{l.name, l.token}
		p.mu.Lock()
		cur := s.leases[k]
		switch {
		case cur == nil: // released or session ended meanwhile
		case err == nil:
			cur.renewAt = t0.Add(l.ttl / 3)
		case errors.Is(err, leasehold.ErrNotHeld):
			p.detachLocked(k)
			p.log.Warn("leasehold proxy: session lease lost", "session", s.id, "name", l.name, "token", l.token)
		default:
			cur.renewAt = p.clock.Now().Add(max(l.ttl/10, time.Millisecond))
			p.log.Warn("leasehold proxy: session lease renewal failed, retrying", "session", s.id, "name", l.name, "err", err)
		}
		p.mu.Unlock()
	}
}

// Close implements Backend: it ends every session (releasing its leases),
// wakes waiters with ErrClosed, ends subscriptions and closes the store.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	var leases []*proxySessionLease
	for _, s := range p.sessions {
		leases = append(leases, p.endSessionLocked(s)...)
	}
	p.mu.Unlock()
	p.releaseLeases(leases, EventReleased)
	p.cancel()
	p.wg.Wait()
	p.evMu.Lock()
	p.hub.closeAll()
	p.evMu.Unlock()
	return p.store.Close()
}

// --- helpers ---

// backoff is capped exponential backoff with full jitter in [cur/2, cur].
type proxyBackoff struct{ cur, max time.Duration }

func (b *proxyBackoff) next() time.Duration {
	d := b.cur
	b.cur = min(b.cur*2, b.max)
	half := d / 2
	return half + time.Duration(mrand.Int64N(int64(half)+1))
}

func proxyRandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
