package server

import (
	"container/heap"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/internal/mutation"
)

// EngineConfig configures the native engine.
type EngineConfig struct {
	// Dir holds the log and snapshots. Empty keeps everything in memory
	// (not durable: a restart forgets every lease).
	Dir string
	// NoSync skips fdatasync: grants survive a process crash but not a
	// machine crash. Unsafe for fencing across power loss.
	NoSync bool
	// SnapshotBytes is how much log triggers a snapshot (default 64 MiB).
	SnapshotBytes int64
	// Clock is the engine's clock (default clock.Real()). Expiry is judged
	// by its monotonic reading.
	Clock  clock.Clock
	Hooks  Hooks
	Logger *slog.Logger
	// RecentEvents is how many events Recent keeps (default 256).
	RecentEvents int
	// TombstoneTTL is how long a freed (released, force-released or
	// expired) grant is at least remembered, so that its holder's repeated
	// release still returns nil (default 10 minutes). A restart gives every
	// grant remembered when the engine stopped this long again. See
	// engine_tombs.go.
	TombstoneTTL time.Duration
	// MaxTombstones is how many freed grants are remembered at most; past
	// it the oldest are forgotten first, even before TombstoneTTL (default
	// 1,048,576). One takes about 250 bytes of memory and 100 of snapshot
	// (measured with 19-byte names and 12-byte owners).
	MaxTombstones int
}

// Engine is the server's native Backend: lease state in memory, every
// change appended to a group-committed log before it is acknowledged,
// waiters queued per name and granted in arrival order by the release or
// expiry that frees the lease, and sessions.
//
// Tokens come from one counter for all names, so a token is never reused
// even after the name's record is forgotten.
//
// Renewals that do not raise a lease's TTL are not logged: after a restart
// every recovered lease (and session) gets its full TTL again from the
// moment of recovery, which is never earlier than any holder's own
// deadline (etcd treats its leases the same way).
type Engine struct {
	cfg  EngineConfig
	clk  clock.Clock
	base time.Time
	log  durableLog
	log_ *slog.Logger
	hub  *hub

	mu        sync.Mutex
	emitMu    sync.Mutex // orders deferred completions in memory-only mode
	deferred  []func(error)
	leases    map[string]*engEntry
	sessions  map[string]*engSession
	dl        deadlines
	held      int
	waiters   int
	token     uint64      // last token issued
	tombs     []tombstone // in the order they were made (engine_tombs.go)
	nTombs    int         // live tombstones in tombs
	closed    bool
	kick      chan struct{}
	stop      chan struct{}
	loopDone  chan struct{}
	snapping  bool
	logged    int64 // bytes logged since the last snapshot began
	wake      int64 // when the expiry loop will next wake by itself
	snapshots sync.WaitGroup

	recs engRecords // versioned records (engine_records.go)
}

type engEntry struct {
	name      string
	owner     string
	reqID     string
	data      string // string, not []byte: 8 bytes less per lease
	token     uint64
	ttl       time.Duration
	loggedTTL time.Duration // the largest TTL logged for this grant
	acquired  int64         // wall clock, unix ns
	held      bool
	tomb      bool // freed recently: remembered for a repeated release
	sess      *engSession
	pending   atomic.Int32  // records appended for this name and not yet durable
	wq        *[]*engWaiter // queued acquires, nil when none (saves memory per lease)
	dl        deadline
}

type engSession struct {
	id     string
	ttl    time.Duration
	leases map[*engEntry]struct{}
	waits  map[*engWaiter]struct{}
	ended  bool
	dl     deadline
}

type engWaiter struct {
	req   AcquireRequest
	sess  *engSession
	since time.Time
	at    int64 // engine clock when queued
	ch    chan grantResult
	done  bool // granted or removed
}

type grantResult struct {
	rec leasehold.Record
	err error
}

// OpenEngine opens (or creates) the engine's data in cfg.Dir and recovers
// its leases.
func OpenEngine(cfg EngineConfig) (*Engine, error) {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.SnapshotBytes <= 0 {
		cfg.SnapshotBytes = 64 << 20
	}
	if cfg.TombstoneTTL <= 0 {
		cfg.TombstoneTTL = 10 * time.Minute
	}
	if cfg.MaxTombstones <= 0 {
		cfg.MaxTombstones = 1 << 20
	}
	e := &Engine{
		cfg: cfg, clk: cfg.Clock, base: cfg.Clock.Now(), log_: cfg.Logger,
		hub:      newHub(cfg.RecentEvents),
		leases:   map[string]*engEntry{},
		sessions: map[string]*engSession{},
		kick:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		loopDone: make(chan struct{}),
	}
	if cfg.Dir != "" {
		r := newRecovery(e)
		start := time.Now()
		l, err := openLog(cfg, r.load, r.apply)
		if err != nil {
			return nil, fmt.Errorf("open the server's log in %s: %w", cfg.Dir, err)
		}
		e.log = l
		r.finish()
		e.log_.Info("recovered leases", "held", e.held, "sessions", len(e.sessions), "last_token", e.token, "records", e.recordCount(), "took", time.Since(start))
	}
	go e.expiryLoop()
	return e, nil
}

// durableLog is the group-committed log (package wal).
type durableLog interface {
	Append(rec []byte, done func(error))
	Sync() error
	Rotate() (uint64, error)
	WriteSnapshot(seq uint64, write func(w io.Writer) error) error
	Size() int64
	Close() error
}

// openLog opens the log; set by engine_wal.go.
var openLog = func(cfg EngineConfig, load func(io.Reader) error, apply func([]byte) error) (durableLog, error) {
	return nil, errors.New("this build has no durable log")
}

// now is the engine's monotonic clock in nanoseconds.
func (e *Engine) now() int64 {
	if mutation.On("expiry-wall-clock") {
		return int64(clock.Wall(e.clk).Sub(e.base))
	}
	return int64(e.clk.Now().Sub(e.base))
}

// lock and unlock bracket every state change. Completions deferred while
// the lock was held (memory-only mode) run after it is released, in order.
func (e *Engine) lock() { e.mu.Lock() }

func (e *Engine) unlock() {
	if len(e.deferred) == 0 {
		e.mu.Unlock()
		return
	}
	fns := e.deferred
	e.deferred = nil
	e.emitMu.Lock()
	e.mu.Unlock()
	for _, f := range fns {
		f(nil)
	}
	e.emitMu.Unlock()
}

// commit appends rec (nil: nothing to log) for ent and calls done once it
// and everything before it is durable. Called with e.mu held.
func (e *Engine) commit(ent *engEntry, rec []byte, done func(error)) {
	first := true
	if ent != nil {
		first = ent.pending.Add(1) == 1
	}
	fn := func(err error) {
		if ent != nil {
			ent.pending.Add(-1)
		}
		done(err)
	}
	if rec != nil {
		e.logged += int64(len(rec))
		if e.logged > e.cfg.SnapshotBytes {
			e.poke()
		}
	}
	if e.log == nil || rec == nil && first {
		// Nothing to wait for: run after unlock.
		e.deferred = append(e.deferred, fn)
		return
	}
	if rec == nil {
		rec = encodeNop()
	}
	e.log.Append(rec, fn)
}

func (e *Engine) emit(ev Event) {
	if e.cfg.Hooks.Event != nil {
		e.cfg.Hooks.Event(ev)
	}
	e.hub.publish(ev)
}

// live reports whether ent is held and unexpired at now.
func (ent *engEntry) live(now int64) bool {
	if ent == nil || !ent.held {
		return false
	}
	if ent.sess != nil {
		return !ent.sess.ended && now < ent.sess.dl.at
	}
	return now < ent.dl.at
}

func (ent *engEntry) remaining(now int64) time.Duration {
	at := ent.dl.at
	if ent.sess != nil {
		at = ent.sess.dl.at
	}
	return time.Duration(at - now)
}

func (ent *engEntry) record(now int64) leasehold.Record {
	return leasehold.Record{
		Name: ent.name, Owner: ent.owner, Token: ent.token, Data: bytesOf(ent.data), TTL: ent.ttl,
		Remaining: ent.remaining(now), Acquired: time.Unix(0, ent.acquired),
	}
}

func (ent *engEntry) heldError(now int64) *leasehold.HeldError {
	return &leasehold.HeldError{Name: ent.name, Owner: ent.owner, Token: ent.token,
		Remaining: ent.remaining(now), Acquired: time.Unix(0, ent.acquired)}
}

// Acquire implements Backend.
func (e *Engine) Acquire(ctx context.Context, req AcquireRequest) (leasehold.Record, error) {
	if err := validateAcquire(req); err != nil {
		return leasehold.Record{}, err
	}
	if err := ctx.Err(); err != nil {
		return leasehold.Record{}, err
	}
	ch := make(chan grantResult, 1)
	e.lock()
	if e.closed {
		e.unlock()
		return leasehold.Record{}, leasehold.ErrClosed
	}
	now := e.now()
	var sess *engSession
	if req.Session != "" {
		sess = e.sessions[req.Session]
		if sess == nil || !sess.liveAt(now) {
			e.unlock()
			return leasehold.Record{}, ErrNoSession
		}
	}
	ent := e.leases[req.Name]
	if ent != nil {
		e.expireIfDue(ent, now)
	}
	switch {
	case ent.live(now) && req.RequestID != "" && ent.reqID == req.RequestID && ent.owner == req.Owner:
		// A retried acquire: the same grant, with a fresh expiry.
		e.refresh(ent, req, sess, now, ch)
	case ent.live(now) && !mutation.On("grant-no-recheck") || ent != nil && len(ent.queue()) > 0:
		if req.Wait <= 0 {
			return leasehold.Record{}, e.refuse(ent, ent.heldError(now))
		}
		w := &engWaiter{req: req, sess: sess, since: e.clk.Now(), at: now, ch: ch}
		ent.setQueue(append(ent.queue(), w))
		e.waiters++
		if sess != nil {
			sess.waits[w] = struct{}{}
		}
		n := len(ent.queue())
		e.commit(nil, nil, func(error) {
			e.emit(Event{Type: EventQueued, Name: req.Name, Owner: req.Owner, Time: w.since, Waiters: n})
		})
		e.unlock()
		return e.wait(ctx, ent, w)
	default:
		if ent == nil {
			ent = &engEntry{name: req.Name}
			ent.dl.ent = ent
			ent.dl.idx = -1
			e.leases[req.Name] = ent
		}
		e.grant(ent, req, sess, now, 0, ch)
	}
	e.unlock()
	r := <-ch
	return r.rec, r.err
}

// refuse returns err, a refusal that reports ent's state (held by someone
// else, not held), once that state is durable (see settle). Called with
// e.mu held; it unlocks.
func (e *Engine) refuse(ent *engEntry, err error) error {
	if cerr := e.settle(ent); cerr != nil {
		return cerr
	}
	return err
}

// settle returns once every record appended for ent so far is durable (at
// once when none is pending, or ent is nil), with the log's error if that
// failed. Every answer that reports a name's state (a refusal, a read)
// waits for it: it must not report a grant, a release or an expiry that a
// crash can still undo, after which the recovered state would contradict
// it. Called with e.mu held; it unlocks.
func (e *Engine) settle(ent *engEntry) error {
	if ent == nil || ent.pending.Load() == 0 {
		// Nothing pending: everything appended for ent is durable (pending
		// drops only once the log reports a record durable).
		e.unlock()
		return nil
	}
	ch := make(chan error, 1)
	e.commit(ent, nil, func(cerr error) { ch <- cerr })
	e.unlock()
	return <-ch
}

// wait blocks a queued waiter until it is granted, its wait ends, or ctx
// ends.
func (e *Engine) wait(ctx context.Context, ent *engEntry, w *engWaiter) (leasehold.Record, error) {
	t := e.clk.NewTimer(w.req.Wait)
	defer t.Stop()
	select {
	case r := <-w.ch:
		return r.rec, r.err
	case <-ctx.Done():
	case <-t.C():
	}
	e.lock()
	if !w.done && ctx.Err() == nil && !e.closed {
		// The wait ran out. The holder's expiry may be due at this very
		// moment while the expiry loop has not applied it yet (its timer
		// fires at the same instant, or it runs late on a loaded machine):
		// apply it first, which grants the lease to the head waiter,
		// perhaps this one.
		e.expireIfDue(ent, e.now())
	}
	if !w.done {
		e.dequeue(ent, w)
		now := e.now()
		if err := ctx.Err(); err != nil {
			e.unlock()
			return leasehold.Record{}, err
		}
		if ent.live(now) {
			return leasehold.Record{}, e.refuse(ent, ent.heldError(now))
		}
		return leasehold.Record{}, e.refuse(ent, &leasehold.HeldError{Name: ent.name, Owner: ent.owner, Token: ent.token, Acquired: time.Unix(0, ent.acquired)})
	}
	e.unlock()
	// Granted as the wait ended: the grant is coming.
	r := <-w.ch
	if r.err != nil || ctx.Err() == nil {
		return r.rec, r.err
	}
	// The caller is gone: free the grant it will never learn of.
	_ = e.Release(context.Background(), r.rec.Name, r.rec.Owner, r.rec.Token)
	return leasehold.Record{}, ctx.Err()
}

// dequeue removes a waiter that leaves without a grant. e.mu held.
func (e *Engine) dequeue(ent *engEntry, w *engWaiter) {
	w.done = true
	q := ent.queue()
	for i, x := range q {
		if x == w {
			ent.setQueue(append(q[:i], q[i+1:]...))
			break
		}
	}
	e.waiters--
	if w.sess != nil {
		delete(w.sess.waits, w)
	}
	n := len(ent.queue())
	e.commit(nil, nil, func(error) {
		e.emit(Event{Type: EventDequeued, Name: ent.name, Owner: w.req.Owner, Time: e.clk.Now(), Waiters: n})
	})
	e.forgetIfIdle(ent)
}

// grant makes a new grant of ent to req and reports it on ch once durable.
// freedAt is when the release or expiry that made room happened (0 for a
// direct grant). e.mu held.
func (e *Engine) grant(ent *engEntry, req AcquireRequest, sess *engSession, now, freedAt int64, ch chan grantResult) {
	e.token++
	if ent.held {
		e.held-- // an expired grant being replaced
	}
	e.unTomb(ent)
	ent.owner, ent.reqID, ent.data = req.Owner, req.RequestID, string(req.Data)
	ent.token, ent.ttl, ent.loggedTTL = e.token, req.TTL, req.TTL
	ent.acquired = e.clk.Now().UnixNano()
	ent.held = true
	e.held++
	e.attach(ent, sess)
	if sess == nil {
		e.dl.set(&ent.dl, now+int64(req.TTL))
	} else {
		e.dl.remove(&ent.dl)
	}
	e.pokeIfEarlier()
	rec := ent.record(now)
	waiters := len(ent.queue())
	e.commit(ent, encodeGrant(ent), func(err error) {
		if err != nil {
			ch <- grantResult{err: fmt.Errorf("persist grant: %w", err)}
			return
		}
		ev := Event{Type: EventGranted, Name: rec.Name, Owner: rec.Owner, Token: rec.Token, Time: rec.Acquired, Waiters: waiters}
		if freedAt != 0 {
			ev.Handoff = time.Duration(e.now() - freedAt)
		}
		e.emit(ev)
		ch <- grantResult{rec: rec}
	})
}

// refresh answers a retried acquire with the grant it already has.
func (e *Engine) refresh(ent *engEntry, req AcquireRequest, sess *engSession, now int64, ch chan grantResult) {
	ent.data = string(req.Data)
	ent.ttl = req.TTL
	var rec []byte
	if sess == nil && ent.sess == nil {
		e.dl.set(&ent.dl, now+int64(req.TTL))
		e.pokeIfEarlier()
		if req.TTL > ent.loggedTTL {
			ent.loggedTTL = req.TTL
			rec = encodeTTL(ent)
		}
	}
	r := ent.record(now)
	e.commit(ent, rec, func(err error) { ch <- grantResult{rec: r, err: err} })
}

func (e *Engine) attach(ent *engEntry, sess *engSession) {
	if ent.sess != nil && ent.sess != sess {
		delete(ent.sess.leases, ent)
	}
	ent.sess = sess
	if sess != nil {
		sess.leases[ent] = struct{}{}
	}
}

// lockEntry takes e.mu and returns name's entry (nil if none) with any
// expiry that is due applied, or ErrClosed (and e.mu not held).
func (e *Engine) lockEntry(name string) (*engEntry, int64, error) {
	e.lock()
	if e.closed {
		e.unlock()
		return nil, 0, leasehold.ErrClosed
	}
	now := e.now()
	ent := e.leases[name]
	if ent != nil {
		e.expireIfDue(ent, now)
	}
	return ent, now, nil
}

// Renew implements Backend.
func (e *Engine) Renew(ctx context.Context, name, owner string, token uint64, ttl time.Duration) error {
	if err := leasehold.ValidateHolder(name, owner, token); err != nil {
		return err
	}
	if err := leasehold.ValidateTTL(ttl); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	ch := make(chan error, 1)
	ent, now, err := e.lockEntry(name)
	if err != nil {
		return err
	}
	if !ent.live(now) || ent.owner != owner || ent.token != token {
		return e.refuse(ent, leasehold.ErrNotHeld)
	}
	ent.ttl = ttl
	var rec []byte
	if ent.sess != nil {
		e.dl.set(&ent.sess.dl, now+int64(ent.sess.ttl)) // a session lease's renewal keeps its session alive
	} else {
		e.dl.set(&ent.dl, now+int64(ttl))
		if ttl > ent.loggedTTL {
			ent.loggedTTL = ttl
			rec = encodeTTL(ent)
		}
	}
	e.pokeIfEarlier()
	ev := Event{Type: EventRenewed, Name: name, Owner: owner, Token: token, Time: e.clk.Now(), Waiters: len(ent.queue())}
	e.commit(ent, rec, func(err error) {
		if err == nil {
			e.emit(ev)
		}
		ch <- err
	})
	e.unlock()
	return <-ch
}

// Release implements Backend.
func (e *Engine) Release(ctx context.Context, name, owner string, token uint64) error {
	if err := leasehold.ValidateHolder(name, owner, token); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	ch := make(chan error, 1)
	ent, now, err := e.lockEntry(name)
	if err != nil {
		return err
	}
	if ent == nil || (ent.owner != owner || ent.token != token) && !mutation.On("release-no-owner") {
		return e.refuse(ent, leasehold.ErrNotHeld)
	}
	if !ent.held {
		// Already released (or expired): repeat the answer once the
		// release is durable.
		e.commit(ent, nil, func(err error) { ch <- err })
		e.unlock()
		return <-ch
	}
	e.free(ent, now, EventReleased, func(err error) { ch <- err })
	e.unlock()
	return <-ch
}

// ForceRelease implements Backend.
func (e *Engine) ForceRelease(ctx context.Context, name string) (leasehold.Record, error) {
	if err := leasehold.ValidateName(name); err != nil {
		return leasehold.Record{}, err
	}
	ch := make(chan error, 1)
	ent, now, err := e.lockEntry(name)
	if err != nil {
		return leasehold.Record{}, err
	}
	if !ent.live(now) {
		return leasehold.Record{}, e.refuse(ent, leasehold.ErrNotFound)
	}
	rec := ent.record(now)
	e.free(ent, now, EventForced, func(err error) { ch <- err })
	e.unlock()
	return rec, <-ch
}

// free ends ent's grant (release, force, expiry), logs it, and hands the
// lease to the first live waiter. e.mu held.
func (e *Engine) free(ent *engEntry, now int64, why EventType, done func(error)) {
	ev := Event{Type: why, Name: ent.name, Owner: ent.owner, Token: ent.token, Time: e.clk.Now()}
	ent.held = false
	e.held--
	e.attach(ent, nil)
	e.dl.remove(&ent.dl)
	ev.Waiters = len(ent.queue())
	e.commit(ent, encodeRelease(ent), func(err error) {
		if err == nil {
			e.emit(ev)
		}
		if done != nil {
			done(err)
		}
	})
	if len(ent.queue()) > 0 {
		q := ent.queue()
		w := q[0]
		ent.setQueue(q[1:])
		e.waiters--
		w.done = true
		if w.sess != nil {
			delete(w.sess.waits, w)
		}
		e.grant(ent, w.req, w.sess, now, now, w.ch)
		return
	}
	e.tomb(ent, now)
}

// expireIfDue ends ent's grant if its TTL (or session) ran out. e.mu held.
func (e *Engine) expireIfDue(ent *engEntry, now int64) {
	if ent.held && !ent.live(now) {
		e.free(ent, now, EventExpired, nil)
	}
}

func (ent *engEntry) queue() []*engWaiter {
	if ent.wq == nil {
		return nil
	}
	return *ent.wq
}

func (ent *engEntry) setQueue(q []*engWaiter) {
	if len(q) == 0 {
		ent.wq = nil
		return
	}
	if ent.wq == nil {
		ent.wq = new([]*engWaiter)
	}
	*ent.wq = q
}

// forgetIfIdle drops an entry that is neither held, queued on, nor a
// recent tombstone.
func (e *Engine) forgetIfIdle(ent *engEntry) {
	if !ent.held && len(ent.queue()) == 0 && !ent.tomb && ent.pending.Load() == 0 {
		if e.leases[ent.name] == ent {
			delete(e.leases, ent.name)
		}
	}
}

// Get implements Backend. It reports only durable state: a grant, release
// or expiry of name still waiting for its group commit (acknowledged to no
// one yet, and undone by a crash before the commit) is reported once it is
// durable, so Get may wait for the group commit under way and the next.
func (e *Engine) Get(ctx context.Context, name string) (leasehold.Record, error) {
	if err := leasehold.ValidateName(name); err != nil {
		return leasehold.Record{}, err
	}
	e.lock()
	if e.closed {
		e.unlock()
		return leasehold.Record{}, leasehold.ErrClosed
	}
	now := e.now()
	ent := e.leases[name]
	if !ent.live(now) {
		return leasehold.Record{}, e.refuse(ent, leasehold.ErrNotFound)
	}
	rec := ent.record(now)
	if err := e.settle(ent); err != nil {
		return leasehold.Record{}, err
	}
	return rec, nil
}

// List implements Backend. Like Get, it reports only durable state: when a
// change of a name it looked at (listed or not) is not durable yet, it
// answers once every change made so far is.
func (e *Engine) List(ctx context.Context, prefix string) ([]leasehold.Record, error) {
	if prefix != "" {
		if err := leasehold.ValidatePrefix(prefix); err != nil {
			return nil, err
		}
	}
	e.lock()
	if e.closed {
		e.unlock()
		return nil, leasehold.ErrClosed
	}
	now := e.now()
	out := []leasehold.Record{}
	pending := false
	for name, ent := range e.leases {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		if ent.live(now) {
			out = append(out, ent.record(now))
		}
		pending = pending || ent.pending.Load() > 0
	}
	ch := make(chan error, 1)
	if pending {
		// One barrier after every record appended so far.
		e.commit(nil, encodeNop(), func(err error) { ch <- err })
	} else {
		ch <- nil
	}
	e.unlock()
	if err := <-ch; err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Waiters implements Backend.
func (e *Engine) Waiters(name string) []Waiter {
	e.lock()
	defer e.unlock()
	ent := e.leases[name]
	if ent == nil {
		return nil
	}
	now := e.now()
	out := make([]Waiter, 0, len(ent.queue()))
	for _, w := range ent.queue() {
		out = append(out, Waiter{Owner: w.req.Owner, Session: w.req.Session, Since: w.since, Waited: time.Duration(now - w.at)})
	}
	return out
}

// Subscribe implements Backend.
func (e *Engine) Subscribe(ctx context.Context, prefix string) <-chan Event {
	return e.hub.subscribe(ctx, prefix)
}

// Recent implements Backend.
func (e *Engine) Recent(n int) []Event { return e.hub.recent(n) }

func (s *engSession) liveAt(now int64) bool { return !s.ended && now < s.dl.at }

// OpenSession implements Backend.
func (e *Engine) OpenSession(ctx context.Context, ttl time.Duration) (Session, error) {
	if err := leasehold.ValidateTTL(ttl); err != nil {
		return Session{}, err
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return Session{}, err
	}
	ch := make(chan error, 1)
	e.lock()
	if e.closed {
		e.unlock()
		return Session{}, leasehold.ErrClosed
	}
	s := e.newSession(hex.EncodeToString(b[:]), ttl)
	now := e.now()
	e.dl.set(&s.dl, now+int64(ttl))
	e.pokeIfEarlier()
	e.commit(nil, encodeSessionOpen(s), func(err error) { ch <- err })
	info := Session{ID: s.id, TTL: ttl, Remaining: ttl}
	e.unlock()
	if err := <-ch; err != nil {
		return Session{}, err
	}
	return info, nil
}

func (e *Engine) newSession(id string, ttl time.Duration) *engSession {
	s := &engSession{id: id, ttl: ttl, leases: map[*engEntry]struct{}{}, waits: map[*engWaiter]struct{}{}}
	s.dl.sess = s
	s.dl.idx = -1
	e.sessions[id] = s
	return s
}

// KeepAlive implements Backend.
func (e *Engine) KeepAlive(ctx context.Context, id string) (Session, error) {
	e.lock()
	defer e.unlock()
	if e.closed {
		return Session{}, leasehold.ErrClosed
	}
	now := e.now()
	s := e.sessions[id]
	if s == nil || !s.liveAt(now) {
		return Session{}, ErrNoSession
	}
	e.dl.set(&s.dl, now+int64(s.ttl))
	e.pokeIfEarlier()
	return Session{ID: s.id, TTL: s.ttl, Remaining: s.ttl, Leases: len(s.leases)}, nil
}

// CloseSession implements Backend.
func (e *Engine) CloseSession(ctx context.Context, id string) error {
	ch := make(chan error, 1)
	e.lock()
	if e.closed {
		e.unlock()
		return leasehold.ErrClosed
	}
	s := e.sessions[id]
	if s == nil || !s.liveAt(e.now()) {
		e.unlock()
		return ErrNoSession
	}
	e.endSession(s, e.now(), EventReleased, func(err error) { ch <- err })
	e.unlock()
	return <-ch
}

// endSession frees a session's leases (handing each to its next waiter),
// drops its waiters and logs its end. e.mu held.
func (e *Engine) endSession(s *engSession, now int64, why EventType, done func(error)) {
	s.ended = true
	e.dl.remove(&s.dl)
	delete(e.sessions, s.id)
	for w := range s.waits {
		for _, ent := range e.leasesOf(w) {
			e.dequeue(ent, w)
		}
		w.ch <- grantResult{err: ErrNoSession}
	}
	ents := make([]*engEntry, 0, len(s.leases))
	for ent := range s.leases {
		ents = append(ents, ent)
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].name < ents[j].name })
	for _, ent := range ents {
		if ent.held {
			e.free(ent, now, why, nil)
		}
	}
	e.commit(nil, encodeSessionClose(s.id), func(err error) {
		if done != nil {
			done(err)
		}
	})
}

func (e *Engine) leasesOf(w *engWaiter) []*engEntry {
	if ent := e.leases[w.req.Name]; ent != nil {
		return []*engEntry{ent}
	}
	return nil
}

// Ready implements Backend.
func (e *Engine) Ready(ctx context.Context) error {
	e.lock()
	defer e.unlock()
	if e.closed {
		return leasehold.ErrClosed
	}
	return nil
}

// Stats implements Backend.
func (e *Engine) Stats() Stats {
	e.lock()
	defer e.unlock()
	return Stats{Held: e.held, Waiters: e.waiters, Sessions: len(e.sessions), Durable: e.log != nil && !e.cfg.NoSync}
}

// Close stops the engine: waiters get ErrClosed, pending records are made
// durable, and the log is closed. Leases stay as they are in the log.
func (e *Engine) Close() error {
	e.lock()
	if e.closed {
		e.unlock()
		return nil
	}
	e.closed = true
	for _, ent := range e.leases {
		for _, w := range ent.queue() {
			w.done = true
			w.ch <- grantResult{err: leasehold.ErrClosed}
		}
		ent.setQueue(nil)
	}
	e.waiters = 0
	e.unlock()
	close(e.stop)
	<-e.loopDone
	e.snapshots.Wait()
	e.hub.closeAll()
	if e.log != nil {
		return e.log.Close()
	}
	return nil
}

// pokeIfEarlier wakes the expiry loop if the earliest deadline is now before the
// time it means to wake (deadlines set at now + TTL rarely are). e.mu held.
func (e *Engine) pokeIfEarlier() {
	if len(e.dl) > 0 && e.dl[0].at < e.wake {
		e.wake = e.dl[0].at
		e.poke()
	}
}

// poke wakes the expiry loop. e.mu held.
func (e *Engine) poke() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// expiryLoop ends grants and sessions whose time ran out, handing leases to
// their waiters, and takes snapshots when the log has grown.
func (e *Engine) expiryLoop() {
	defer close(e.loopDone)
	for {
		e.lock()
		now := e.now()
		for len(e.dl) > 0 && e.dl[0].at <= now {
			d := e.dl[0]
			switch {
			case d.ent != nil:
				e.expireIfDue(d.ent, now)
			case d.sess != nil && !d.sess.ended:
				e.endSession(d.sess, now, EventExpired, nil)
			}
			if d.idx >= 0 && d.at <= now {
				e.dl.remove(d) // nothing left to end
			}
		}
		e.sweepTombs(now)
		e.maybeSnapshot()
		wait := time.Duration(math.MaxInt64)
		if len(e.dl) > 0 {
			wait = time.Duration(e.dl[0].at - now)
		}
		if len(e.tombs) > 0 {
			wait = min(wait, e.cfg.TombstoneTTL)
		}
		wait = min(wait, time.Minute)
		e.wake = now + int64(wait)
		e.unlock()
		t := e.clk.NewTimer(wait)
		select {
		case <-e.stop:
			t.Stop()
			return
		case <-e.kick:
			t.Stop()
		case <-t.C():
		}
	}
}

// deadline is an entry's or a session's place in the expiry heap.
type deadline struct {
	at   int64
	idx  int
	ent  *engEntry
	sess *engSession
}

type deadlines []*deadline

func (h deadlines) Len() int           { return len(h) }
func (h deadlines) Less(i, j int) bool { return h[i].at < h[j].at }
func (h deadlines) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx = i
	h[j].idx = j
}
func (h *deadlines) Push(x any) {
	d := x.(*deadline)
	d.idx = len(*h)
	*h = append(*h, d)
}
func (h *deadlines) Pop() any {
	old := *h
	d := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	d.idx = -1
	return d
}

func (h *deadlines) set(d *deadline, at int64) {
	d.at = at
	if d.idx >= 0 && d.idx < len(*h) && (*h)[d.idx] == d {
		heap.Fix(h, d.idx)
		return
	}
	heap.Push(h, d)
}

func (h *deadlines) remove(d *deadline) {
	if d.idx >= 0 && d.idx < len(*h) && (*h)[d.idx] == d {
		heap.Remove(h, d.idx)
	}
	d.idx = -1
}

func validateAcquire(req AcquireRequest) error {
	if err := req.AcquireRequest.Validate(); err != nil {
		return err
	}
	if req.Wait < 0 {
		return &leasehold.InvalidError{Field: "wait", Reason: "must not be negative"}
	}
	return nil
}

func bytesOf(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}
