package server

import (
	"context"
	"log/slog"
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
//   - FIFO wait queues. On a store that queues waiters itself
//     (leasehold.Queuer: Redis, PostgreSQL, etcd, another lease server),
//     every waiting Acquire waits in the store's queue (AcquireWait, with
//     the request's owner, request id, TTL and data), so all the proxies in
//     front of the store, and the store's other clients, share its one
//     arrival order. The proxy keeps a list of its own waiters (Waiters,
//     Stats, the queued, dequeued and granted events) and ends a store wait
//     when the request's Wait runs out, its context or session ends, or the
//     proxy closes. On any other store (memory, SQLite, DynamoDB) waiters
//     are served in arrival order among the waiters of this proxy
//     instance: only the head of the queue tries the store, on the store's
//     push notification (leasehold.Watcher) or with jittered capped
//     backoff, never sleeping past the holder's remaining time; waiters on
//     other instances (and other clients of the store) compete with the
//     head through the engine, so there FIFO order holds per server
//     instance, not across instances. Acquire without Wait is a plain
//     TryAcquire and does not queue (a queuing store refuses it while
//     others wait).
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
//     them, as with the Engine). A store answers a repeated acquire of a
//     request with the same grant and a repeated release as done, without
//     saying it was a repeat: the proxy reports a grant, and its release,
//     once, as long as it remembers them (the newest 16,384 of each,
//     proxy_reported.go). A grant the store made for the proxy's own look
//     at a request (a give-up's or a reclaim's try) that was never
//     reported is released without an event.
type Proxy struct {
	store   leasehold.Store
	watcher leasehold.Watcher
	queuer  leasehold.Queuer // the store's own FIFO queue, if it has one
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
	parks        map[string]*proxyPark           // waits between two polls (proxy_park.go)
	permitWaits  map[string][]*proxyPermitWaiter // semaphore → its waiters (proxy_permits.go)
	waiting      int                             // queued waiters, all names
	sessions     map[string]*proxySession
	leaseSession map[proxyLeaseKey]*proxySession
	granted      grantSet  // grants reported lately (proxy_reported.go)
	released     grantSet  // grants released lately
	heldAt       time.Time // last recount of Held
	heldBusy     bool      // a recount is running

	held atomic.Int64 // estimate of live leases

	// evMu orders event delivery (hub and hooks) as the changes were
	// ordered under mu. Lock order: mu, then evMu.
	evMu sync.Mutex
	hub  *hub
}

var _ Backend = (*Proxy)(nil)

// proxyName is the proxy's state for one lease name: its wait queue (on a
// leasehold.Queuer store, the list of this proxy's waiters in the store's
// queue) and a lock that orders this proxy's changes to the name with
// their events.
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
		names: map[string]*proxyName{}, parks: map[string]*proxyPark{}, permitWaits: map[string][]*proxyPermitWaiter{}, sessions: map[string]*proxySession{},
		leaseSession: map[proxyLeaseKey]*proxySession{},
		hub:          newHub(cfg.RecentEvents),
	}
	if w, ok := store.(leasehold.Watcher); ok {
		p.watcher = w
	}
	if q, ok := store.(leasehold.Queuer); ok {
		p.queuer = q
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
	if ev.Type != EventQueued && ev.Type != EventDequeued {
		// A permit's events count its semaphore's waiters that may take it.
		ev.Waiters += len(p.permitWaitersLocked(ev.Name))
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

func invalidf(field, reason string) error {
	return &leasehold.InvalidError{Field: field, Reason: reason}
}

func (p *Proxy) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}
