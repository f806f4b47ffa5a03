package etcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/backoff"
	"github.com/leasehold/leasehold/internal/randid"
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

// sessionIdle is how long the session lease is kept alive after its last
// waiter left, for the next one.
const sessionIdle = 10 * time.Second

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

// session is the etcd lease that the store's queue entries are attached to.
type session struct {
	id     clientv3.LeaseID
	done   chan struct{} // closed when the keepalive ends
	cancel context.CancelFunc
	users  int // waiters using it; under Store.qmu
}

func (se *session) dead() bool {
	select {
	case <-se.done:
		return true
	default:
		return false
	}
}

// joinSession returns the live session, granting one if there is none.
func (s *Store) joinSession(ctx context.Context) (*session, error) {
	s.qmu.Lock()
	if se := s.sess; se != nil && !se.dead() {
		se.users++
		s.qmu.Unlock()
		return se, nil
	}
	s.qmu.Unlock()
	resp, err := s.cli.Grant(ctx, leaseSeconds(s.liveness))
	if err != nil {
		return nil, s.fail(ctx, "queue session", err)
	}
	kctx, cancel := context.WithCancel(s.stop)
	ch, err := s.cli.KeepAlive(kctx, resp.ID)
	if err != nil {
		cancel()
		s.revokeLater(resp.ID)
		return nil, s.fail(ctx, "queue session", err)
	}
	se := &session{id: resp.ID, done: make(chan struct{}), cancel: cancel, users: 1}
	go func() {
		for range ch {
		}
		close(se.done)
	}()
	s.qmu.Lock()
	defer s.qmu.Unlock()
	if cur := s.sess; cur != nil && !cur.dead() { // another waiter was quicker
		cancel()
		s.revokeLater(resp.ID)
		cur.users++
		return cur, nil
	}
	s.sess = se
	return se, nil
}

// countWaiter counts an AcquireWait of name in progress in this store;
// the returned func uncounts it.
func (s *Store) countWaiter(name string) func() {
	s.qmu.Lock()
	s.waiting[name]++
	s.qmu.Unlock()
	return func() {
		s.qmu.Lock()
		defer s.qmu.Unlock()
		if s.waiting[name]--; s.waiting[name] <= 0 {
			delete(s.waiting, name)
		}
	}
}

// hasWaiters reports whether this store has an AcquireWait of name in
// progress.
func (s *Store) hasWaiters(name string) bool { return s.waiters(name) > 0 }

// waiters counts this store's AcquireWaits of name in progress.
func (s *Store) waiters(name string) int {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	return s.waiting[name]
}

// leaveSession drops a waiter's use of se; the store ends se after
// sessionIdle without waiters.
func (s *Store) leaveSession(se *session) {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	if se.users--; se.users > 0 {
		return
	}
	if s.sess != se {
		se.cancel()
		return
	}
	time.AfterFunc(sessionIdle, func() {
		s.qmu.Lock()
		idle := s.sess == se && se.users == 0
		if idle {
			s.sess = nil
		}
		s.qmu.Unlock()
		if idle {
			se.cancel()
			s.revokeLater(se.id)
		}
	})
}

// dropSession ends se at once (an entry of it could not be removed: its
// expiry removes it). Its other waiters queue again.
func (s *Store) dropSession(se *session) {
	s.qmu.Lock()
	if s.sess == se {
		s.sess = nil
	}
	s.qmu.Unlock()
	se.cancel()
	s.revokeLater(se.id)
}

// closeSession revokes the session at Close.
func (s *Store) closeSession(ctx context.Context) {
	s.qmu.Lock()
	se := s.sess
	s.sess = nil
	s.qmu.Unlock()
	if se != nil {
		se.cancel()
		_, _ = s.cli.Revoke(ctx, se.id)
	}
}

// waiter is one AcquireWait.
type waiter struct {
	s               *Store
	octx            context.Context // for its requests (see AcquireWait)
	req             leasehold.AcquireRequest
	lk, ok, qp      string
	secs            int64
	se              *session
	key             string     // its entry, "" before it is queued
	rev             int64      // the entry's CreateRevision
	stale           []string   // old entries of this waiter, to delete when queueing again
	sent            string     // an entry an enqueue Txn with an unknown outcome may have made
	tried           string     // the lease key's value in the last grant attempt
	next            grantLease // the head's grant lease, made ready while it waits
	pre             *preWatch  // the lease key's watch, opened before the read that made it the head
	uncertain       bool       // an acquire Txn failed with an unknown outcome
	wakes, acquires int        // watches that ended, acquire Txns sent (for tests)
}

// next is what a waiter does after reading the queue and the lease.
type next struct {
	watch   string           // wait for this key's deletion
	from    int64            // from this revision
	create  int64            // the CreateRevision it was read with
	acquire bool             // head, and the lease is free
	lost    bool             // the entry is gone: queue again
	mine    *mvccpb.KeyValue // the lease key holds this request's own grant
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
	w.drop()
	if err != nil {
		w.abandon()
	}
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
		if w.key != "" && !n.lost && n.mine == nil && w.se.dead() {
			if berr := backoff.Sleep(ctx, requeue.Next()); berr != nil {
				return leasehold.Record{}, berr
			}
			n = next{lost: true}
		}
		switch {
		case w.key == "" || n.lost:
			rec, n, done, err = w.enqueue(ctx)
		case n.mine != nil:
			rec, done, err = w.again(ctx, n.mine)
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
			if err = w.waitDeleted(ctx, n.watch, n.from, n.create); err == nil && w.se.dead() {
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

// entryValue is the value of a queue entry: the waiter's owner and
// request id (a TryAcquire refused because of the queue names the head's
// owner).
func (w *waiter) entryValue() string {
	return record{owner: w.req.Owner, requestID: w.req.RequestID, ttl: w.req.TTL, acquired: time.Now()}.encode()
}

// tryValue is the lease key's value for a grant attempt made at now; the
// waiter keeps it to recognise its grant after an unknown outcome, also
// without a request id (the time makes it unique).
func (w *waiter) tryValue(now time.Time) string {
	w.tried = record{owner: w.req.Owner, requestID: w.req.RequestID, ttl: w.req.TTL, acquired: now, data: w.req.Data}.encode()
	return w.tried
}

// granted builds the record of a grant made by the Txn of resp on g.
func (w *waiter) granted(ctx context.Context, resp *clientv3.TxnResponse, g grantLease, now time.Time, rerr error) (leasehold.Record, error) {
	token := uint64(resp.Header.Revision)
	w.key, w.stale = "", nil
	if rerr != nil {
		// The grant's etcd lease may expire early: give it back.
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = w.s.Release(rctx, w.req.Name, w.req.Owner, token)
		cancel()
		if ctx.Err() != nil {
			return leasehold.Record{}, ctx.Err()
		}
		return leasehold.Record{}, fmt.Errorf("etcd acquire: granted (token %d) but its spare etcd lease could not be refreshed (%s); the grant was released", token, rerr.Error())
	}
	w.s.used(g)
	w.s.noteGrant(w.req.Name, w.req.Owner, token, g.leaseRef)
	rec := leasehold.Record{
		Name: w.req.Name, Owner: w.req.Owner, Token: token, Data: append([]byte(nil), w.req.Data...),
		TTL: w.req.TTL, Remaining: time.Duration(g.granted) * time.Second, Acquired: time.Unix(0, now.UnixNano()),
	}
	if ctx.Err() != nil {
		// Granted as the wait ended: the caller is gone.
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = w.s.Release(rctx, w.req.Name, w.req.Owner, token)
		cancel()
		return leasehold.Record{}, ctx.Err()
	}
	return rec, nil
}

// enqueue grants the lease if it is free and nobody waits, and otherwise
// queues the waiter, in one Txn.
func (w *waiter) enqueue(ctx context.Context) (leasehold.Record, next, bool, error) {
	s := w.s
	// Entries of this waiter that may exist: its last one (removed, or of
	// a dead session) and one an earlier enqueue may have made. They go in
	// the same Txn, before the new entry's predecessor is read.
	for _, k := range []string{w.key, w.sent} {
		if k != "" && !slices.Contains(w.stale, k) {
			w.stale = append(w.stale, k)
		}
	}
	w.key, w.sent = "", ""
	if w.se.dead() {
		s.leaveSession(w.se)
		se, err := s.joinSession(w.octx)
		if err != nil {
			w.se = s.deadSession()
			return leasehold.Record{}, next{}, false, err
		}
		w.se = se
	}
	// Try to grant at once only with a spare at hand (a waiter that finds
	// the lease held does not wait for a Grant first), and only if no
	// other waiter of this store waits for the name (then the lease is
	// surely taken, and the spares are better kept for the heads).
	var g grantLease
	spare := false
	if s.waiters(w.req.Name) <= 1 {
		g, spare = s.spare(w.octx, w.secs)
	}
	key := w.qp + fmt.Sprintf("%016x/", int64(w.se.id)) + randid.Hex(8)
	w.sent = key // until the reply: the Txn may have queued it
	now := time.Now()
	then := []clientv3.Op{clientv3.OpPut(w.lk, w.tryValue(now), clientv3.WithLease(g.id)), clientv3.OpPut(w.ok, w.req.Owner)}
	var els []clientv3.Op
	for _, k := range w.stale {
		then = append(then, clientv3.OpDelete(k))
		els = append(els, clientv3.OpDelete(k))
	}
	nst := len(w.stale)
	els = append(els, clientv3.OpPut(key, w.entryValue(), clientv3.WithLease(w.se.id)), clientv3.OpGet(w.lk),
		clientv3.OpGet(w.qp, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
			clientv3.WithLimit(2), clientv3.WithKeysOnly()))
	txn := s.cli.Txn(w.octx).If(cmpAbsent(w.lk), cmpQueueEmpty(w.qp)).Then(then...).Else(els...)
	if !spare {
		txn = s.cli.Txn(w.octx).Then(els...) // just queue
	}
	resp, err := txn.Commit()
	rerr := g.settle()
	if err == nil {
		w.sent = ""
	}
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			// The spare or the session is gone; nothing was written.
			if spare {
				s.revokeLater(g.id)
			}
			s.dropSession(w.se)
			return leasehold.Record{}, next{}, false, err
		}
		if spare {
			s.unused(g, rerr)
		}
		w.uncertain = true
		return leasehold.Record{}, next{}, false, err
	}
	if resp.Succeeded && spare {
		rec, err := w.granted(ctx, resp, g, now, rerr)
		return rec, next{}, true, err
	}
	if spare {
		s.unused(g, rerr)
	}
	w.key, w.rev, w.stale = key, resp.Header.Revision, nil
	var older *mvccpb.KeyValue
	for _, kv := range resp.Responses[nst+2].GetResponseRange().Kvs {
		if kv.CreateRevision < w.rev {
			older = kv
			break
		}
	}
	return leasehold.Record{}, w.decide(true, older, one(resp.Responses[nst+1]), resp.Header.Revision), false, nil
}

// deadSession stands in for a session that could not be made: enqueue
// tries again.
func (s *Store) deadSession() *session {
	se := &session{done: make(chan struct{}), cancel: func() {}, users: 1}
	close(se.done)
	return se
}

// one returns the first key a range operation read, or nil.
func one(r *pb.ResponseOp) *mvccpb.KeyValue {
	if kvs := r.GetResponseRange().Kvs; len(kvs) > 0 {
		return kvs[0]
	}
	return nil
}

// olderOp reads the entry just before the waiter's.
func (w *waiter) olderOp() clientv3.Op {
	return clientv3.OpGet(w.qp, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
		clientv3.WithMaxCreateRev(w.rev-1), clientv3.WithLimit(1), clientv3.WithKeysOnly())
}

// look reads the waiter's entry, the one before it and the lease key, in
// one read-only Txn.
func (w *waiter) look(ctx context.Context) (next, error) {
	resp, err := w.s.cli.Txn(w.octx).Then(clientv3.OpGet(w.key, clientv3.WithKeysOnly()), w.olderOp(), clientv3.OpGet(w.lk)).Commit()
	if err != nil {
		return next{}, err
	}
	return w.decide(one(resp.Responses[0]) != nil, one(resp.Responses[1]), one(resp.Responses[2]), resp.Header.Revision), nil
}

func (w *waiter) decide(own bool, older, lease *mvccpb.KeyValue, rev int64) next {
	switch {
	case lease != nil && w.ours(lease):
		return next{mine: lease}
	case w.uncertain:
		w.uncertain = false
		if !own {
			return next{lost: true}
		}
	case !own:
		return next{lost: true}
	}
	switch {
	case older != nil:
		return next{watch: string(older.Key), from: rev + 1, create: older.CreateRevision}
	case lease != nil:
		return next{watch: w.lk, from: rev + 1, create: lease.CreateRevision}
	}
	return next{acquire: true}
}

// ours reports whether kv is a grant to this request (same owner and
// non-empty request id): one whose reply was lost.
func (w *waiter) ours(kv *mvccpb.KeyValue) bool {
	if w.req.RequestID == "" {
		return false
	}
	cur, err := decodeRecord(kv.Value)
	return err == nil && cur.owner == w.req.Owner && cur.requestID == w.req.RequestID
}

// again serves the request's own grant found while waiting (an earlier
// attempt's reply was lost) as a retried acquire does, and leaves the
// queue.
func (w *waiter) again(ctx context.Context, kv *mvccpb.KeyValue) (leasehold.Record, bool, error) {
	var ops []clientv3.Op
	for _, k := range append([]string{w.key, w.sent}, w.stale...) {
		if k != "" {
			ops = append(ops, clientv3.OpDelete(k))
		}
	}
	if len(ops) > 0 {
		if _, err := w.s.cli.Txn(w.octx).Then(ops...).Commit(); err != nil {
			return leasehold.Record{}, false, err
		}
		w.key, w.sent, w.stale = "", "", nil
	}
	cur, err := decodeRecord(kv.Value)
	if err != nil {
		return leasehold.Record{}, true, err
	}
	rec, done, err := w.s.reacquire(w.octx, w.req, kv, cur)
	if err != nil || !done {
		return leasehold.Record{}, false, err
	}
	return rec, true, nil
}

// acquire is the head's grant: one Txn that puts the lease key if it is
// absent, the waiter's entry still exists, and no entry is older; it
// deletes the entry. Otherwise its Else reads what to do next.
func (w *waiter) acquire(ctx context.Context) (leasehold.Record, next, bool, error) {
	s := w.s
	g, err := w.lease()
	if err != nil {
		return leasehold.Record{}, next{}, false, err
	}
	w.acquires++
	now := time.Now()
	resp, err := s.cli.Txn(w.octx).If(
		cmpAbsent(w.lk),
		clientv3.Compare(clientv3.CreateRevision(w.key), "=", w.rev),
		clientv3.Compare(clientv3.CreateRevision(w.qp), ">", w.rev-1).WithPrefix(), // none older
	).Then(
		clientv3.OpPut(w.lk, w.tryValue(now), clientv3.WithLease(g.id)), clientv3.OpPut(w.ok, w.req.Owner), clientv3.OpDelete(w.key),
	).Else(
		clientv3.OpGet(w.key, clientv3.WithKeysOnly()), w.olderOp(), clientv3.OpGet(w.lk),
	).Commit()
	rerr := g.settle()
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			s.revokeLater(g.id)
			return leasehold.Record{}, next{}, false, err
		}
		s.unused(g, rerr)
		w.uncertain = true
		return leasehold.Record{}, next{}, false, err
	}
	if resp.Succeeded {
		rec, err := w.granted(ctx, resp, g, now, rerr)
		return rec, next{}, true, err
	}
	s.unused(g, rerr)
	return leasehold.Record{}, w.decide(one(resp.Responses[0]) != nil, one(resp.Responses[1]), one(resp.Responses[2]), resp.Header.Revision), false, nil
}

// waitDeleted returns when key (read at revision from-1 with CreateRevision
// create) is deleted at or after revision from, when the watch breaks (the
// caller reads again), or when the waiter's session ends; with ctx's error
// when ctx ends.
//
// The watch starts at etcd's current revision rather than at from: etcd
// catches a watch that starts in the past up with the present only in a
// loop that runs every 100 ms, which would delay the handoff by 50 ms on
// average. So when etcd's revision moved on between the read and the
// watch's creation, the key is read again (a read-only request) to learn
// whether it went meanwhile.
func (w *waiter) waitDeleted(ctx context.Context, key string, from, create int64) error {
	var wch clientv3.WatchChan
	var cancel func()
	if key == w.lk && w.pre != nil {
		wch, cancel = w.pre.ch, w.pre.cancel
		w.pre = nil
	} else {
		wch, cancel = w.openWatch(ctx, key)
	}
	defer cancel()
	created := false
	for {
		select {
		case resp, ok := <-wch:
			if !ok || resp.Err() != nil || resp.Canceled {
				if err := ctx.Err(); err != nil {
					return err
				}
				if w.s.isClosed() {
					return leasehold.ErrClosed
				}
				return nil
			}
			if len(resp.Events) > 0 {
				return nil
			}
			if resp.Created && !created {
				created = true
				if resp.Header.Revision >= from {
					r, err := w.s.cli.Get(w.octx, key, clientv3.WithKeysOnly())
					if err != nil || len(r.Kvs) == 0 || r.Kvs[0].CreateRevision != create {
						return nil
					}
				}
			}
		case <-w.se.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// openWatch watches key's deletions from etcd's current revision (see
// waitDeleted), reporting its creation.
func (w *waiter) openWatch(ctx context.Context, key string) (clientv3.WatchChan, func()) {
	wctx := clientv3.WithRequireLeader(ctx)
	if key == w.lk {
		// The head's watch goes on a watch stream of its own: the etcd
		// client registers the watches of one stream one at a time, and
		// the handoff should not wait behind the other waiters'.
		wctx = metadata.AppendToOutgoingContext(wctx, "leasehold-watch", "head")
	}
	wctx, cancel := context.WithCancel(wctx)
	stop := context.AfterFunc(w.s.stop, cancel)
	return w.s.cli.Watch(wctx, key, clientv3.WithFilterPut(), clientv3.WithCreatedNotify()), func() { stop(); cancel() }
}

// preWatch is a watch of the lease key opened before the read that made
// the waiter the head: its creation revision then precedes the read, so
// no deletion after the read can be missed and the key need not be read
// again (waitDeleted).
type preWatch struct {
	ch     clientv3.WatchChan
	cancel func()
}

func (w *waiter) closePre() {
	if w.pre != nil {
		w.pre.cancel()
		w.pre = nil
	}
}

// abandon removes the waiter's entry after its wait ended without a
// grant, and releases a grant to this request that an acquire with an
// unknown outcome may have made. If the entry cannot be removed, the
// session is ended so that etcd removes it.
func (w *waiter) abandon() {
	s := w.s
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var ops []clientv3.Op
	for _, k := range append([]string{w.key, w.sent}, w.stale...) {
		if k != "" {
			ops = append(ops, clientv3.OpDelete(k))
		}
	}
	if (len(ops) == 0 && !w.uncertain) || s.cli.Ctx().Err() != nil {
		return
	}
	ops = append(ops, clientv3.OpGet(w.lk))
	clean := func(ctx context.Context) error {
		resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return err
		}
		if kv := one(resp.Responses[len(ops)-1]); kv != nil && (w.ours(kv) || w.tried != "" && string(kv.Value) == w.tried) {
			_ = s.Release(ctx, w.req.Name, w.req.Owner, uint64(kv.CreateRevision))
		}
		return nil
	}
	if err := clean(ctx); err != nil {
		if len(ops) > 1 && w.se.id != clientv3.NoLease {
			s.dropSession(w.se)
		}
		return
	}
	if w.uncertain || w.sent != "" {
		// A request whose reply was lost may still be applied after
		// this one: look again a little later.
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.closed {
			s.bg.Add(1)
			go func() {
				defer s.bg.Done()
				ctx, cancel := context.WithTimeout(s.stop, 10*time.Second)
				defer cancel()
				if backoff.Sleep(ctx, time.Second) == nil {
					_ = clean(ctx)
				}
			}()
		}
	}
	w.key, w.stale, w.sent = "", nil, ""
}

// cleanUp removes, for an AcquireWait called with an ended ctx, what an
// earlier call with the same owner and request id left behind: its queue
// entries, and a grant handed to it. Best effort, within requestGrace.
func (s *Store) cleanUp(ctx context.Context, req leasehold.AcquireRequest) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), requestGrace)
	defer cancel()
	w := &waiter{req: req}
	resp, err := s.cli.Txn(cctx).Then(clientv3.OpGet(s.queuePrefix(req.Name), clientv3.WithPrefix()), clientv3.OpGet(s.leaseKey(req.Name))).Commit()
	if err != nil {
		return
	}
	var ops []clientv3.Op
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		if w.ours(kv) {
			ops = append(ops, clientv3.OpDelete(string(kv.Key)))
		}
	}
	if len(ops) > 0 {
		_, _ = s.cli.Txn(cctx).Then(ops...).Commit()
	}
	if kv := one(resp.Responses[1]); kv != nil && w.ours(kv) {
		_ = s.Release(cctx, req.Name, req.Owner, uint64(kv.CreateRevision))
	}
}

// cmpQueueEmpty holds when no waiter is queued under prefix qp (etcd
// compares an empty range as a key with CreateRevision 0).
func cmpQueueEmpty(qp string) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(qp), "=", 0).WithPrefix()
}

// ready gets the etcd lease of the head's grant while it waits for the
// release, so that the handoff need not wait for a Grant. It is refreshed
// (or granted) now, after the wait began, so a grant on it still lives a
// TTL past the caller's t0.
func (w *waiter) ready() {
	if w.next.id != clientv3.NoLease {
		return
	}
	if g, err := w.s.obtain(w.octx, w.secs); err == nil {
		w.next = g
	}
}

// lease returns the etcd lease for the head's grant: the one made ready if
// it is still fresh, else a spare or a new one.
func (w *waiter) lease() (grantLease, error) {
	g := w.next
	w.next = grantLease{}
	if g.id != clientv3.NoLease {
		if g.fresh(time.Now()) {
			return g, nil
		}
		w.s.unused(g, g.settle())
	}
	return w.s.obtain(w.octx, w.secs)
}

// drop hands back a lease made ready and not used.
func (w *waiter) drop() {
	if g := w.next; g.id != clientv3.NoLease {
		w.next = grantLease{}
		w.s.unused(g, g.settle())
	}
}
