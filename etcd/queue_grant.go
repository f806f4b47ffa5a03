package etcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold"
)

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

// again serves the request's own grant found while waiting (an earlier
// attempt's reply was lost) as a retried acquire does, and leaves the
// queue.
func (w *waiter) again(ctx context.Context, g grant) (leasehold.Record, bool, error) {
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
	cur, err := decodeRecord(g.kv.Value)
	if err != nil {
		return leasehold.Record{}, true, err
	}
	rec, done, err := w.s.reacquire(w.octx, w.req, g, cur)
	if err != nil || !done {
		return leasehold.Record{}, false, err
	}
	// Kept: if it is on the lease of an acquire whose reply was lost,
	// that is the grant's lease now, not to be revoked at finish.
	w.unheard = slices.DeleteFunc(w.unheard, func(id clientv3.LeaseID) bool { return int64(id) == g.kv.Lease })
	return rec, true, nil
}

// acquire is the head's grant: one Txn that puts the lease key if it is
// absent, the waiter's entry still exists, and no entry is older; it
// deletes the entry. Otherwise its Else reads what to do next.
func (w *waiter) acquire(ctx context.Context) (leasehold.Record, next, bool, error) {
	s := w.s
	g, prep, err := w.lease()
	if err != nil {
		return leasehold.Record{}, next{}, false, err
	}
	w.acquires++
	now := time.Now()
	txn := s.cli.Txn(w.octx).If(
		cmpFree(w.lk),
		clientv3.Compare(clientv3.CreateRevision(w.key), "=", w.rev),
		clientv3.Compare(clientv3.CreateRevision(w.qp), ">", w.rev-1).WithPrefix(), // none older
	).Then(
		clientv3.OpPut(w.lk, w.tryValue(now), clientv3.WithLease(g.id)), clientv3.OpPut(tokenKey(w.lk, 0), "", clientv3.WithLease(g.id)),
		clientv3.OpPut(w.ok, w.req.Owner), clientv3.OpDelete(w.key),
	).Else(
		clientv3.OpGet(w.key, clientv3.WithKeysOnly()), w.olderOp(), opGetGrant(w.lk),
	)
	resp, err := commitVia(s.acquireHook, w.octx, func(context.Context) (*clientv3.TxnResponse, error) { return txn.Commit() })
	rerr := g.settle()
	if err != nil {
		switch {
		case errors.Is(err, rpctypes.ErrLeaseNotFound) && prep:
			w.prepDead = true // the entry still names it; revoked at the end
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			s.revokeLater(g.id)
		case prep:
			w.uncertain = true
		default:
			// Not a spare again: a grant may be on it, or may still be
			// put on it (etcd can apply the Txn later). The waiter may
			// find that grant its own (again); otherwise finish revokes
			// it, which ends such a grant whenever etcd applies it.
			w.unheard = append(w.unheard, g.id)
			w.uncertain = true
		}
		return leasehold.Record{}, next{}, false, err
	}
	if resp.Succeeded {
		if prep {
			w.next = grantLease{}
		}
		s.noteQueue(w.req.Name, true) // it queued: its release looks for a head
		rec, err := w.granted(ctx, resp, g, now, rerr)
		return rec, next{}, true, err
	}
	if !prep {
		s.unused(g, rerr)
	}
	return leasehold.Record{}, w.decide(one(resp.Responses[0]) != nil, one(resp.Responses[1]), resp.Responses[2].GetResponseRange().Kvs, resp.Header.Revision), false, nil
}

// handed serves a grant that a release handed to this waiter: the lease
// key kv on its prepared etcd lease, with token. The release deleted its
// entry; entries of earlier attempts, if any, are deleted now.
//
// done is false when the grant could not be kept: the prepared lease's
// refresh had failed, so it is not known to outlive the caller's t0 by a
// TTL; it is refreshed now and, if that fails too, the grant is given back
// and the waiter queues again.
func (w *waiter) handed(ctx context.Context, kv *mvccpb.KeyValue, token int64) (rec leasehold.Record, done bool, err error) {
	s := w.s
	g := w.next
	if w.prepDead {
		sent := time.Now()
		if ka, err := s.cli.KeepAliveOnce(w.octx, g.id); err == nil {
			g.born, g.granted, w.prepDead = sent, ka.TTL, false
		} else {
			rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = s.Release(rctx, w.req.Name, w.req.Owner, uint64(token))
			cancel()
			s.revokeLater(g.id)
			w.next, w.prepDead = grantLease{}, false
			w.key = "" // the handoff deleted it
			return leasehold.Record{}, false, nil
		}
	}
	w.next = grantLease{}
	var ops []clientv3.Op
	if w.sent != "" || len(w.stale) > 0 {
		for _, k := range append([]string{w.key, w.sent}, w.stale...) {
			if k != "" {
				ops = append(ops, clientv3.OpDelete(k))
			}
		}
	}
	w.key, w.sent, w.stale = "", "", nil
	if len(ops) > 0 {
		_, _ = s.cli.Txn(w.octx).Then(ops...).Commit()
	}
	cur, err := decodeRecord(kv.Value)
	if err != nil {
		return leasehold.Record{}, true, err
	}
	// Noted, not used(): the lease left the spares when the waiter queued,
	// and the releaser's lease has just become one, so no refill.
	s.spares.note(g.leaseRef)
	s.noteGrant(w.req.Name, w.req.Owner, uint64(token), g.leaseRef)
	s.noteQueue(w.req.Name, true)
	if ctx.Err() != nil {
		// Handed over as the wait ended: the caller is gone.
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = s.Release(rctx, w.req.Name, w.req.Owner, uint64(token))
		cancel()
		return leasehold.Record{}, true, ctx.Err()
	}
	return leasehold.Record{
		Name: w.req.Name, Owner: w.req.Owner, Token: uint64(token), Data: append([]byte(nil), w.req.Data...), TTL: w.req.TTL,
		Remaining: max(time.Until(g.born.Add(time.Duration(g.granted)*time.Second)), 0), Acquired: cur.acquired,
	}, true, nil
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

// lease returns the etcd lease for the head's own acquire: the prepared
// one (prep) unless it may be gone, else a spare or a new one. The
// prepared lease stays the waiter's whatever the Txn's outcome, since its
// entry names it.
func (w *waiter) lease() (g grantLease, prep bool, err error) {
	if w.next.id != clientv3.NoLease && !w.prepDead {
		return w.next, true, nil
	}
	g, err = w.s.obtain(w.octx, w.secs)
	return g, false, err
}

// finish revokes the etcd leases of acquire Txns whose outcome it did not
// learn (unheard), which ends a grant etcd made or makes on one late, and
// hands back the prepared lease when the wait ended without a grant on
// it: to the spares if no release can hand it a grant any more (the
// waiter's entries are surely gone), else it is revoked, which also ends
// a grant handed to it late.
func (w *waiter) finish() {
	for _, id := range w.unheard {
		w.s.revokeLater(id)
	}
	g := w.next
	if g.id == clientv3.NoLease {
		return
	}
	rerr := g.settle()
	if w.prepDead || w.uncertain || w.key != "" || w.sent != "" || len(w.stale) > 0 {
		w.s.revokeLater(g.id)
		return
	}
	w.s.unused(g, rerr)
}

// keepPrepared refreshes the prepared lease while the waiter waits, every
// third of its TTL, so that a grant handed over on it lives a whole TTL
// from about the handoff and not less; a waiter that died stops
// refreshing it, and a grant handed to it ends within a TTL.
func (w *waiter) keepPrepared(ctx context.Context) {
	g := &w.next
	if g.id == clientv3.NoLease || w.prepDead {
		return
	}
	sent := time.Now()
	if sent.Sub(g.born) < time.Duration(g.granted)*time.Second/3 {
		return
	}
	switch err := w.s.refresher.refresh(ctx, g.id); {
	case err == nil:
		g.born = sent
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		w.prepDead = true
	}
}
