package etcd

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storekit"
)

// Releasing, and handing the lease to the queue's head in the same write.
//
// A waiter prepares the etcd lease its grant will go on when it queues
// (one of its store's spares, or a new one, refreshed or granted after
// its wait began and refreshed while it waits) and records the lease's id
// in its queue entry. A release that finds waiters queued writes the
// head's grant in its own Txn: if the releaser still holds the lease
// (owner key and token key) and the entry it read is still the head (it
// exists with the CreateRevision read, and no entry is older), the Txn
// rewrites the lease key with the head's record (owner, request id, TTL,
// data, as queued) on the head's prepared etcd lease, deletes the
// releaser's token key and creates the other one on that lease (the new
// token: the Txn's revision, as for any grant), records the head as the
// owner, and deletes the head's entry. The head, which watches the lease
// key, sees the grant on its own etcd lease and returns without a write
// of its own. If the compares fail (the head left, or another is older)
// the same Txn just deletes the lease, as a plain release does, and the
// head wakes and acquires as after an expiry. If the head's prepared
// lease has expired (a waiter that died more than a TTL ago) etcd refuses
// the Txn as a whole and the release is sent again as a plain one.
//
// Reading the queue is a second request (a serializable read: the Txn's
// compares make a stale read harmless), so a release only does it when a
// queue is likely: this store has waiters for the name, the lease was
// granted after queueing, or the last release here found waiters. And it
// is skipped when this store made the handoff that granted the lease: that
// Txn also read the next head (nextHead).

// handOffOnRelease switches the handoff in the release's own Txn
// described above (on). Off, a release deletes the lease and the queue's
// head acquires it in a Txn of its own (two writes a handoff). Under heavy
// load the conformance suite found illegal histories with it on (2 of 4
// runs of `go test -race -count=4 -run TestConformance/Linearizable`) and
// off (1 of 4); and off, R16's etcd rows had gaps of 2.7–3.2 s where on
// they had under 0.32 s. It stays on; the switch is for tests and for
// the hunt of that cause.
var handOffOnRelease = true

// maxQueueHints bounds the names remembered as having a queue.
const maxQueueHints = 8192

// nextHead is the queue's head as a handoff left it: the entry that the
// release of the grant it made (token, token key tk) will likely hand the
// lease to. When that release is made by this store too (several waiters
// of one store take turns), it need not read the queue first; the Txn's
// compares check the entry is still the head.
type nextHead struct {
	token int64
	tk    string
	head  *mvccpb.KeyValue
}

// noteNextHead records the head left by a handoff that made the grant
// with token and token key tk (head nil: the queue was empty).
func (s *Store) noteNextHead(name string, token int64, tk string, head *mvccpb.KeyValue) {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	if head == nil {
		delete(s.heads, name)
		return
	}
	if len(s.heads) >= maxQueueHints {
		clear(s.heads)
	}
	s.heads[name] = nextHead{token: token, tk: tk, head: head}
}

// takeNextHead returns and forgets the head noted for the release of the
// grant of name with token, if any.
func (s *Store) takeNextHead(name string, token uint64) (string, *mvccpb.KeyValue) {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	h, ok := s.heads[name]
	delete(s.heads, name)
	if !ok || h.token != int64(token) {
		return "", nil
	}
	return h.tk, h.head
}

// noteQueue records whether name was last seen with waiters queued.
func (s *Store) noteQueue(name string, queued bool) {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	if !queued {
		delete(s.queued, name)
		return
	}
	if len(s.queued) >= maxQueueHints {
		clear(s.queued)
	}
	s.queued[name] = true
}

// queueLikely reports whether a release of name should look for a head
// to hand the lease to.
func (s *Store) queueLikely(name string) bool {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	return s.queued[name] || s.waiting[name] > 0
}

// Release implements leasehold.Store: if owner and token are those of the
// latest grant, the grant ends (a no-op when it has already ended, so a
// repeated release succeeds): handed to the head of the name's queue in
// the same Txn when a waiter has queued (see above), otherwise its keys
// are deleted. The grant's etcd lease then becomes a spare, or is revoked
// in the background (see spares.go).
func (s *Store) Release(ctx context.Context, name, owner string, token uint64) error {
	if err := storekit.ValidateHolder(name, owner, token); err != nil {
		return err
	}
	if err := s.begin(ctx); err != nil {
		return err
	}
	if handOffOnRelease && s.queueLikely(name) {
		if done, err := s.handOff(ctx, name, owner, token); done {
			return err
		}
	}
	ok, lk := s.ownerKey(name), s.leaseKey(name)
	resp, err := s.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(ok), "=", int64(token)),
		clientv3.Compare(clientv3.Value(ok), "=", owner),
	).Then(
		clientv3.OpDelete(lk, clientv3.WithRange(grantEnd(lk)), clientv3.WithPrevKV()),
		clientv3.OpGet(s.queuePrefix(name), clientv3.WithPrefix(), clientv3.WithCountOnly()),
	).Commit()
	if err != nil {
		return s.fail(ctx, "release", err)
	}
	if !resp.Succeeded {
		return leasehold.ErrNotHeld
	}
	s.noteQueue(name, resp.Responses[1].GetResponseRange().Count > 0)
	s.released(name, resp.Responses[0].GetResponseDeleteRange().PrevKvs)
	return nil
}

// released notes that the grant of name ended; prev holds its lease key
// as it was.
func (s *Store) released(name string, prev []*mvccpb.KeyValue) {
	s.spares.setGrant(name, "", 0, clientv3.NoLease)
	lk := s.leaseKey(name)
	for _, kv := range prev {
		if string(kv.Key) == lk {
			s.replaced(name, clientv3.LeaseID(kv.Lease), true, kv.Value)
		}
	}
}

// handOff releases the grant by handing it to the queue's head, in one
// Txn after a read. done is false when it did not release: nobody is
// queued, the head prepared no etcd lease (a waiter of an older version)
// or its lease is gone, the grant has no token key, or the read failed;
// the caller then releases plainly.
func (s *Store) handOff(ctx context.Context, name, owner string, token uint64) (done bool, err error) {
	lk, ok, qp := s.leaseKey(name), s.ownerKey(name), s.queuePrefix(name)
	tk, head := s.takeNextHead(name, token)
	if head == nil {
		resp, err := s.cli.Txn(ctx).Then(
			clientv3.OpGet(lk, clientv3.WithRange(grantEnd(lk)), clientv3.WithSerializable()),
			clientv3.OpGet(qp, append(clientv3.WithFirstCreate(), clientv3.WithPrefix(), clientv3.WithSerializable())...),
		).Commit()
		if err != nil {
			return false, nil
		}
		if head = one(resp.Responses[1]); head == nil {
			s.noteQueue(name, false)
			return false, nil
		}
		cur, _, held := grantOf(resp.Responses[0].GetResponseRange().Kvs)
		if !held || cur.tk == "" || cur.token != int64(token) {
			return false, nil
		}
		tk = cur.tk
	}
	w, prepared, err := decodeEntry(head.Value)
	if err != nil || prepared == clientv3.NoLease {
		return false, nil
	}
	val := record{owner: w.owner, requestID: w.requestID, ttl: w.ttl, acquired: time.Now(), data: w.data}.encode()
	next := tokenKey(lk, 0)
	if tk == next {
		next = tokenKey(lk, 1)
	}
	owned := []clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(ok), "=", int64(token)),
		clientv3.Compare(clientv3.Value(ok), "=", owner),
	}
	tr, err := s.cli.Txn(ctx).If(append(owned,
		cmpToken(lk, int64(token)),
		cmpAbsent(next),
		clientv3.Compare(clientv3.CreateRevision(string(head.Key)), "=", head.CreateRevision),
		clientv3.Compare(clientv3.CreateRevision(qp), ">", head.CreateRevision-1).WithPrefix(), // none older
	)...).Then(
		clientv3.OpPut(lk, val, clientv3.WithLease(prepared), clientv3.WithPrevKV()),
		clientv3.OpDelete(tk),
		clientv3.OpPut(next, "", clientv3.WithLease(prepared)),
		clientv3.OpPut(ok, w.owner),
		clientv3.OpDelete(string(head.Key)),
		clientv3.OpGet(qp, append(clientv3.WithFirstCreate(), clientv3.WithPrefix())...), // the next head, after this one's delete
	).Else(
		clientv3.OpTxn(owned, []clientv3.Op{clientv3.OpDelete(lk, clientv3.WithRange(grantEnd(lk)), clientv3.WithPrevKV())}, nil),
	).Commit()
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return false, nil // the head's prepared lease is gone; nothing was written
	}
	if err != nil {
		return true, s.fail(ctx, "release", err)
	}
	s.noteQueue(name, true)
	if tr.Succeeded {
		s.noteNextHead(name, tr.Header.Revision, next, one(tr.Responses[5]))
		if prev := tr.Responses[0].GetResponsePut().PrevKv; prev != nil {
			s.released(name, []*mvccpb.KeyValue{prev})
		} else {
			s.spares.setGrant(name, "", 0, clientv3.NoLease)
		}
		return true, nil
	}
	plain := tr.Responses[0].GetResponseTxn()
	if !plain.Succeeded {
		return true, leasehold.ErrNotHeld
	}
	s.released(name, plain.Responses[0].GetResponseDeleteRange().PrevKvs)
	return true, nil
}
