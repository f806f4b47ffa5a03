package etcd

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/backoff"
)

var _ leasehold.Queuer = (*Store)(nil)

// The FIFO queue. A waiter is a key under the name's queue prefix
// (queuePrefix), attached to the store's session: an etcd lease of
// liveness seconds that the store keeps alive while it has waiters. Its
// CreateRevision is its place in the queue, so the order is the order in
// which etcd applied the enqueues, whichever process or store made them. A
// waiter whose process dies leaves an entry that etcd deletes when the
// session lease expires, at most the liveness window (plus etcd's 0.5 s
// revocation loop) later.
//
// Only the head acts: each waiter watches the deletion of the entry just
// before its own (as etcd's concurrency.Mutex does), so a departure wakes
// exactly one waiter; the head watches the lease key, and when it is
// deleted (a release, or etcd expiring the holder's lease) acquires in one
// Txn that also asserts it is the head: its entry exists with its
// revision and no entry of the name has a lower CreateRevision (a compare
// over the queue's key range). The same Txn deletes its entry, so the next
// waiter is woken by the grant. TryAcquire compares that the range is
// empty, so it never overtakes a queued waiter.
//
// Usually the head does not even acquire: each waiter prepares the etcd
// lease of its grant when it queues and names it in its entry, and a
// release hands the lease to the head in its own Txn (release.go); the
// head sees the lease key written on its prepared lease and returns.

// DefaultQueueLiveness is how long, by default, a waiter's queue entry
// outlives a process that stopped keeping it alive (WithQueueLiveness).
const DefaultQueueLiveness = 5 * time.Second

// queueHint is HeldError.Remaining when TryAcquire is refused because
// waiters are queued for a free lease: the head takes it within a round
// trip or two, or its entry expires.
const queueHint = 100 * time.Millisecond

// requestGrace is how long after the caller's ctx ended a request of
// AcquireWait may still take.
const requestGrace = 2 * time.Second

// WithQueueLiveness sets how long a waiter's queue entry survives a
// waiting process that died (default DefaultQueueLiveness): the TTL of the
// etcd lease that the store keeps alive while it has waiters, rounded up to
// whole seconds, at least 2 s (etcd's minimum). It must be in [1s, 1h].
// Short windows let a crashed waiter block the queue for less time, but a
// process whose keepalives are held up longer than the window loses its
// place (its waiters queue again at the back).
func WithQueueLiveness(d time.Duration) Option {
	return func(c *config) {
		if (d < time.Second || d > time.Hour) && c.err == nil {
			c.err = &leasehold.InvalidError{Field: "queue liveness", Reason: fmt.Sprintf("%s is outside [1s, 1h]", d)}
		}
		c.liveness = d
	}
}

// queuePrefix is the range of name's waiters. Names contain no control
// characters, so no other name's range overlaps it.
func (s *Store) queuePrefix(name string) string { return s.prefix + "w/" + name + "\x00" }

// waiter is one AcquireWait.
type waiter struct {
	s               *Store
	octx            context.Context // for its requests (see AcquireWait)
	req             leasehold.AcquireRequest
	lk, ok, qp      string
	secs            int64
	se              *session
	key             string             // its entry, "" before it is queued
	rev             int64              // the entry's CreateRevision
	stale           []string           // old entries of this waiter, to delete when queueing again
	sent            string             // an entry an enqueue Txn with an unknown outcome may have made
	tried           string             // the lease key's value in the last grant attempt
	next            grantLease         // the etcd lease prepared for its grant, named in its entry
	prepDead        bool               // next may be gone, or a release may still hand it a grant: revoke it at the end
	pre             *preWatch          // the lease key's watch, opened before the read that made it the head
	uncertain       bool               // an acquire Txn failed with an unknown outcome
	unheard         []clientv3.LeaseID // etcd leases of such Txns (not prepared ones): revoked at the end unless a grant found on one is kept
	wakes, acquires int                // watches that ended, acquire Txns sent (for tests)
}

// next is what a waiter does after reading the queue and the lease.
type next struct {
	watch   string // wait for this key's deletion
	from    int64  // from this revision
	create  int64  // the CreateRevision it was read with
	acquire bool   // head, and the lease is free
	lost    bool   // the entry is gone: queue again
	mine    *grant // the lease key holds this request's own grant
	handed  *grant // a release handed the lease to this waiter
}

// AcquireWait implements leasehold.Queuer: it queues the request behind
// the name's waiters and returns when it was granted the lease, in arrival
// order. See the comment at the top of this file and docs/stores/etcd.md.
// When ctx ends it removes its entry and returns ctx's error, releasing a
// grant that raced with the end. Called with a ctx that has already ended
// and a non-empty request id, it cleans up after an earlier call with the
// same owner and request id (cleanUp). Transient etcd errors are retried
// in place (the entry keeps its place while the session lives).
func (s *Store) AcquireWait(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	if err := req.Validate(); err != nil {
		return leasehold.Record{}, err
	}
	if err := s.begin(ctx); err != nil {
		if ctx.Err() != nil && req.RequestID != "" && !s.isClosed() {
			s.cleanUp(ctx, req)
		}
		return leasehold.Record{}, err
	}
	se, err := s.joinSession(ctx)
	if err != nil {
		return leasehold.Record{}, err
	}
	defer s.countWaiter(req.Name)()
	// Requests are not cut off when ctx ends, only requestGrace later, so
	// that the waiter knows what each did and can undo it.
	octx, ocancel := context.WithCancel(s.stop)
	defer ocancel()
	defer context.AfterFunc(ctx, func() { time.AfterFunc(requestGrace, ocancel) })()
	w := &waiter{s: s, req: req, lk: s.leaseKey(req.Name), ok: s.ownerKey(req.Name), qp: s.queuePrefix(req.Name),
		secs: leaseSeconds(req.TTL), se: se, octx: octx}
	defer func() { s.leaveSession(w.se) }()
	rec, err := w.run(ctx)
	w.closePre()
	if err != nil {
		w.abandon()
	}
	w.finish()
	if s.waitHook != nil {
		s.waitHook(req, w.wakes, w.acquires)
	}
	return rec, err
}

func (w *waiter) run(ctx context.Context) (leasehold.Record, error) {
	s := w.s
	retry := backoff.New(20*time.Millisecond, time.Second)
	var n next
	var err error
	var rec leasehold.Record
	var done bool
	// A session that ended (its keepalive stopped, or it was dropped) while
	// its entry still exists in etcd: the waiter's watches end at once, so
	// it queues again on a new session (the old entry deleted in the same
	// Txn), after a pause that grows if that keeps happening.
	requeue := backoff.New(20*time.Millisecond, time.Second)
	for {
		if err := ctx.Err(); err != nil {
			return leasehold.Record{}, err
		}
		if s.isClosed() || s.cli.Ctx().Err() != nil {
			return leasehold.Record{}, leasehold.ErrClosed
		}
		if w.key != "" && !n.lost && n.mine == nil && n.handed == nil && w.se.dead() {
			if berr := backoff.Sleep(ctx, requeue.Next()); berr != nil {
				return leasehold.Record{}, berr
			}
			n = next{lost: true}
		}
		switch {
		case w.key == "" || n.lost:
			rec, n, done, err = w.enqueue(ctx)
		case n.handed != nil:
			rec, done, err = w.handed(ctx, n.handed.kv, n.handed.token)
			n = next{}
		case n.mine != nil:
			rec, done, err = w.again(ctx, *n.mine)
			n = next{}
		case n.acquire:
			rec, n, done, err = w.acquire(ctx)
		case n.watch != "":
			if n.watch == w.lk {
				w.ready() // the head: have its grant's etcd lease at hand
			}
			if n.watch != w.lk {
				w.closePre()
			}
			var got *mvccpb.KeyValue
			if got, err = w.waitDeleted(ctx, n.watch, n.from, n.create); err == nil && got != nil {
				w.wakes++
				rec, done, err = w.handed(ctx, got, got.ModRevision)
				n = next{}
				break
			}
			if err == nil && w.se.dead() {
				break // queue again (above)
			}
			if err == nil {
				w.wakes++
				if n.watch == w.lk {
					rec, n, done, err = w.acquire(ctx)
				} else {
					// Probably the head now: watch the lease key already.
					ch, cancel := w.openWatch(ctx, w.lk)
					w.pre = &preWatch{ch: ch, cancel: cancel}
					n, err = w.look(ctx)
				}
			}
		default:
			n, err = w.look(ctx)
		}
		if done {
			w.closePre()
			return rec, err
		}
		if n.watch != w.lk {
			w.closePre()
		}
		if err != nil {
			if ctx.Err() != nil || s.isClosed() || s.cli.Ctx().Err() != nil {
				return leasehold.Record{}, s.fail(ctx, "acquire", err)
			}
			n = next{} // look again
			if berr := backoff.Sleep(ctx, retry.Next()); berr != nil {
				return leasehold.Record{}, berr
			}
			continue
		}
		retry.Reset()
	}
}
