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

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/backoff"
	"github.com/leasehold/leasehold/internal/randid"
)

// entryValue is the value of a queue entry: the waiter's owner and
// request id (a TryAcquire refused because of the queue names the head's
// owner).
func (w *waiter) entryValue() string {
	return record{owner: w.req.Owner, requestID: w.req.RequestID, ttl: w.req.TTL, acquired: time.Now()}.encode()
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
