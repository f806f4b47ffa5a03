package etcd

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/backoff"
	"github.com/leasehold/leasehold/internal/randid"
)

// entryVersion is the first byte of a queue entry's value: the id of the
// etcd lease the waiter prepared for its grant, then its record (owner,
// request id, TTL, data: what a release that hands it the lease writes;
// a TryAcquire refused because of the queue names the head's owner).
// Entries of older versions are a bare record (recordVersion) without a
// prepared lease: a release does not hand them the lease.
const entryVersion = 2

// entryValue is the value of the waiter's queue entry.
func (w *waiter) entryValue() string {
	b := binary.AppendUvarint([]byte{entryVersion}, uint64(w.next.id))
	return string(b) + record{owner: w.req.Owner, requestID: w.req.RequestID, ttl: w.req.TTL, acquired: time.Now(), data: w.req.Data}.encode()
}

// decodeEntry reads a queue entry's value (or a lease key's record): the
// record and the prepared etcd lease (NoLease if none).
func decodeEntry(v []byte) (record, clientv3.LeaseID, error) {
	if len(v) == 0 || v[0] != entryVersion {
		r, err := decodeRecord(v)
		return r, clientv3.NoLease, err
	}
	id, n := binary.Uvarint(v[1:])
	if n <= 0 {
		return record{}, clientv3.NoLease, errCorrupt
	}
	r, err := decodeRecord(v[1+n:])
	return r, clientv3.LeaseID(id), err
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
	// The etcd lease of the grant: a grant at once goes on it, and the
	// entry names it, so that a release can hand the lease over on it (see
	// release.go). It is this waiter's until the wait ends (finish).
	if w.prepDead && w.next.id != clientv3.NoLease {
		s.revokeLater(w.next.id) // its entries go in this Txn
		w.next, w.prepDead = grantLease{}, false
	}
	if w.next.id == clientv3.NoLease {
		g, err := s.obtain(w.octx, w.secs)
		if err != nil {
			return leasehold.Record{}, next{}, false, err
		}
		w.next = g
	}
	g := w.next
	key := w.qp + fmt.Sprintf("%016x/", int64(w.se.id)) + randid.Hex(8)
	w.sent = key // until the reply: the Txn may have queued it
	now := time.Now()
	then := []clientv3.Op{clientv3.OpPut(w.lk, w.tryValue(now), clientv3.WithLease(g.id)),
		clientv3.OpPut(tokenKey(w.lk, 0), "", clientv3.WithLease(g.id)), clientv3.OpPut(w.ok, w.req.Owner)}
	var els []clientv3.Op
	for _, k := range w.stale {
		then = append(then, clientv3.OpDelete(k))
		els = append(els, clientv3.OpDelete(k))
	}
	nst := len(w.stale)
	// The entry is put only if its tombstone does not exist: an attempt
	// whose reply was lost is retired with one (retire), so that etcd
	// applying it late, after the waiter moved on, leaves no entry.
	tomb := s.tombKey(key)
	els = append(els, clientv3.OpTxn([]clientv3.Cmp{cmpAbsent(tomb)}, []clientv3.Op{clientv3.OpPut(key, w.entryValue(), clientv3.WithLease(w.se.id))}, nil),
		opGetGrant(w.lk),
		clientv3.OpGet(w.qp, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
			clientv3.WithLimit(2), clientv3.WithKeysOnly()))
	commit := func(ctx context.Context) (*clientv3.TxnResponse, error) {
		return s.cli.Txn(ctx).If(cmpFree(w.lk), cmpQueueEmpty(w.qp), cmpAbsent(tomb)).Then(then...).Else(els...).Commit()
	}
	resp, err := commitVia(s.enqueueHook, w.octx, commit)
	rerr := w.next.settle()
	if err == nil {
		w.sent = ""
	}
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			// The prepared lease or the session is gone; nothing was
			// written. Both are replaced.
			s.revokeLater(g.id)
			w.next = grantLease{}
			s.dropSession(w.se)
			return leasehold.Record{}, next{}, false, err
		}
		// Unknown outcome: an entry naming the prepared lease may exist,
		// or a grant on it; the lease stays this waiter's. The Txn may
		// also still be applied later: retire it.
		w.uncertain = true
		w.retire(key)
		return leasehold.Record{}, next{}, false, err
	}
	if resp.Succeeded {
		w.next = grantLease{}
		rec, err := w.granted(ctx, resp, g, now, rerr)
		return rec, next{}, true, err
	}
	if rerr != nil {
		w.prepDead = true // its refresh failed: the waiter's own acquire uses another
	}
	w.key, w.rev, w.stale = key, resp.Header.Revision, nil
	var older *mvccpb.KeyValue
	for _, kv := range resp.Responses[nst+2].GetResponseRange().Kvs {
		if kv.CreateRevision < w.rev {
			older = kv
			break
		}
	}
	n := w.decide(true, older, resp.Responses[nst+1].GetResponseRange().Kvs, resp.Header.Revision)
	if n.handed != nil {
		// A release handed the lease to an earlier entry of this waiter
		// (its session had ended while it was the head) and deleted that
		// one before this Txn: the entry just put is no release's to
		// delete, and left behind it would head the queue (refusing every
		// TryAcquire, and taking the lease at this waiter's release).
		// handed deletes it.
		w.stale = append(w.stale, key)
	}
	return leasehold.Record{}, n, false, nil
}

// tombKey is the tombstone of the queue entry key k (keys.go): while it
// exists, an enqueue of k does nothing.
func (s *Store) tombKey(k string) string { return s.prefix + "t/" + strings.TrimPrefix(k, s.prefix) }

// retire writes the tombstone of entry key k, whose enqueue Txn had an
// unknown outcome, on the waiter's session lease (the one k's entry would
// be on: the tombstone lives as long as an entry could). Then etcd applying
// that Txn late creates nothing, whatever the waiter did meanwhile; an
// entry it made before the tombstone is deleted as a stale one (enqueue,
// handed, again, abandon). If the session lease is gone, so is any entry
// on it, and no late Txn can create one. If the tombstone cannot be
// written, the session is ended, which removes every entry on it.
func (w *waiter) retire(k string) {
	s := w.s
	b := backoff.New(50*time.Millisecond, 500*time.Millisecond)
	for attempt := 0; attempt < 4; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := s.cli.Put(ctx, s.tombKey(k), "", clientv3.WithLease(w.se.id))
		cancel()
		if err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound) || s.cli.Ctx().Err() != nil {
			return
		}
		time.Sleep(b.Next())
	}
	s.dropSession(w.se)
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
	resp, err := w.s.cli.Txn(w.octx).Then(clientv3.OpGet(w.key, clientv3.WithKeysOnly()), w.olderOp(), opGetGrant(w.lk)).Commit()
	if err != nil {
		return next{}, err
	}
	return w.decide(one(resp.Responses[0]) != nil, one(resp.Responses[1]), resp.Responses[2].GetResponseRange().Kvs, resp.Header.Revision), nil
}

// decide says what to do after a read of the waiter's entry (own: it
// exists), the entry just older than it, and the lease and token keys.
func (w *waiter) decide(own bool, older *mvccpb.KeyValue, grantKVs []*mvccpb.KeyValue, rev int64) next {
	g, _, held := grantOf(grantKVs)
	var lease *mvccpb.KeyValue
	if held {
		lease = g.kv
	}
	switch {
	case lease != nil && w.handedTo(lease):
		return next{handed: &g}
	case lease != nil && w.ours(lease):
		return next{mine: &g}
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

// ours reports whether kv (a lease key or a queue entry) is this
// request's (same owner and non-empty request id): a grant whose reply was
// lost, or one handed to it (on its prepared etcd lease).
func (w *waiter) ours(kv *mvccpb.KeyValue) bool {
	if w.handedTo(kv) {
		return true
	}
	if w.req.RequestID == "" {
		return false
	}
	cur, _, err := decodeEntry(kv.Value)
	return err == nil && cur.owner == w.req.Owner && cur.requestID == w.req.RequestID
}

// handedTo reports whether the lease key kv holds a grant on the etcd
// lease this waiter prepared: one a release handed to it. No other grant
// uses that lease while the waiter may still be handed one.
func (w *waiter) handedTo(kv *mvccpb.KeyValue) bool {
	return w.next.id != clientv3.NoLease && kv.Lease == int64(w.next.id)
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
	ops = append(ops, opGetGrant(w.lk))
	// clean reports whether it released a grant a release had handed to
	// this waiter on its prepared lease.
	clean := func(ctx context.Context) (handed bool, err error) {
		resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return false, err
		}
		if g, _, held := grantOf(resp.Responses[len(ops)-1].GetResponseRange().Kvs); held && (w.ours(g.kv) || w.tried != "" && string(g.kv.Value) == w.tried) {
			handed = w.handedTo(g.kv)
			_ = s.Release(ctx, w.req.Name, w.req.Owner, uint64(g.token))
		}
		return handed, nil
	}
	handed, err := clean(ctx)
	if handed {
		// The prepared lease carried a grant: its release may have made
		// it a spare or revoked it (replaced), so it must not also go
		// back to the spares at finish: revoked there. Put back as well,
		// one etcd lease served two grants, and the revoke of one ended
		// the other (the conformance suite saw a second holder).
		w.prepDead = true
	}
	if err != nil {
		if len(ops) > 1 && w.se.id != clientv3.NoLease {
			s.dropSession(w.se)
		}
		w.prepDead = true // a release may still hand it the lease: revoke it (finish)
		return
	}
	if w.uncertain || w.sent != "" {
		w.prepDead = true
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
					_, _ = clean(ctx)
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
	resp, err := s.cli.Txn(cctx).Then(clientv3.OpGet(s.queuePrefix(req.Name), clientv3.WithPrefix()), opGetGrant(s.leaseKey(req.Name))).Commit()
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
	if g, _, held := grantOf(resp.Responses[1].GetResponseRange().Kvs); held && w.ours(g.kv) {
		_ = s.Release(cctx, req.Name, req.Owner, uint64(g.token))
	}
}

// cmpQueueEmpty holds when no waiter is queued under prefix qp (etcd
// compares an empty range as a key with CreateRevision 0).
func cmpQueueEmpty(qp string) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(qp), "=", 0).WithPrefix()
}
