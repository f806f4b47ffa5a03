package etcd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/backoff"
	"github.com/leasehold/leasehold/storekit"
)

// maxAttempts bounds the loops that start over when a key changed between
// two requests (a holder's lease being deleted, a concurrent retry).
const maxAttempts = 50

// TryAcquire implements leasehold.Store. One Txn creates the lease key on
// an etcd lease of its own and records the owner, if the key is absent;
// otherwise it reads the holder. The token is the Txn's revision. With a
// spare etcd lease (the usual case) that is the only round trip, beside a
// concurrent refresh of the spare; without one a Grant comes first. When
// the lease is held, one more request asks etcd how long the holder's etcd
// lease has left (and, while it has under a second, asks again until it is
// renewed or gone).
func (s *Store) TryAcquire(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	if err := req.Validate(); err != nil {
		return leasehold.Record{}, err
	}
	if err := s.begin(ctx); err != nil {
		return leasehold.Record{}, err
	}
	lk, ok, qp := s.leaseKey(req.Name), s.ownerKey(req.Name), s.queuePrefix(req.Name)
	secs := leaseSeconds(req.TTL)
	now := time.Now()
	val := record{owner: req.Owner, requestID: req.RequestID, ttl: req.TTL, acquired: now, data: req.Data}.encode()
	for attempt := 0; attempt < maxAttempts; attempt++ {
		var g grantLease
		var rerr error
		resp, err := s.peek(ctx, req.Name, attempt == 0)
		if err != nil {
			return leasehold.Record{}, err
		}
		if resp == nil {
			if g, err = s.obtain(ctx, secs); err != nil {
				return leasehold.Record{}, err
			}
			commit := func(ctx context.Context) (*clientv3.TxnResponse, error) {
				return s.cli.Txn(ctx).If(cmpFree(lk), cmpQueueEmpty(qp)).
					Then(clientv3.OpPut(lk, val, clientv3.WithLease(g.id)), clientv3.OpPut(tokenKey(lk, 0), "", clientv3.WithLease(g.id)),
						clientv3.OpPut(ok, req.Owner)).
					Else(opGetGrant(lk), clientv3.OpGet(qp, append(clientv3.WithFirstCreate(), clientv3.WithPrefix())...)).Commit()
			}
			resp, err = commitVia(s.acquireHook, ctx, commit)
			rerr = g.settle()
			if errors.Is(err, rpctypes.ErrLeaseNotFound) {
				continue // the spare was gone; nothing was written
			}
			if err != nil {
				// Unknown outcome: the grant may have happened, or may
				// still happen (see endUnheard).
				s.endUnheard(g.id)
				return leasehold.Record{}, s.fail(ctx, "acquire", err)
			}
			if resp.Succeeded {
				if rerr != nil {
					// Granted, but the spare's refresh failed (most often:
					// ctx ended during it): the grant may expire before
					// its TTL, and the caller gets an error, so nobody
					// would hold it. End it (the red team of this fix
					// found such grants held for their TTL after 1-6 % of
					// calls cut at 0-10 ms).
					s.endUnheard(g.id)
					return leasehold.Record{}, refreshFailed(ctx, uint64(resp.Header.Revision), rerr)
				}
				s.used(g)
				s.noteGrant(req.Name, req.Owner, uint64(resp.Header.Revision), g.leaseRef)
				return leasehold.Record{
					Name: req.Name, Owner: req.Owner, Token: uint64(resp.Header.Revision), Data: bytes.Clone(req.Data),
					TTL: req.TTL, Remaining: time.Duration(g.granted) * time.Second, Acquired: time.Unix(0, now.UnixNano()),
				}, nil
			}
			s.unused(g, rerr)
		}
		cg, _, held := grantOf(resp.Responses[0].GetResponseRange().Kvs)
		if !held {
			head := one(resp.Responses[1])
			if head == nil {
				continue
			}
			// Free, but waiters are queued: the head's turn.
			w, _, err := decodeEntry(head.Value)
			if err != nil {
				return leasehold.Record{}, err
			}
			return leasehold.Record{}, &leasehold.HeldError{Name: req.Name, Owner: w.owner, Remaining: queueHint}
		}
		kv := cg.kv
		cur, err := decodeRecord(kv.Value)
		if err != nil {
			return leasehold.Record{}, err
		}
		if req.RequestID != "" && cur.owner == req.Owner && cur.requestID == req.RequestID {
			rec, done, err := s.reacquire(ctx, req, cg, cur)
			if err != nil || done {
				return rec, err
			}
			continue
		}
		rem, alive, err := s.judge(ctx, clientv3.LeaseID(kv.Lease), cur.ttl)
		if err != nil {
			return leasehold.Record{}, err
		}
		if alive {
			return leasehold.Record{}, &leasehold.HeldError{
				Name: req.Name, Owner: cur.owner, Token: uint64(cg.token), Remaining: rem, Acquired: cur.acquired,
			}
		}
		// The holder's etcd lease is gone: its key is gone too by now.
	}
	return leasehold.Record{}, fmt.Errorf("etcd acquire %q: the lease kept changing; gave up after %d attempts", req.Name, maxAttempts)
}

// unheardWait is how long a call whose acquire Txn failed with an unknown
// outcome waits for the revoke of the Txn's etcd lease before it returns
// (endUnheard); the revoke goes on in the background after that.
const unheardWait = 250 * time.Millisecond

// endUnheard ends a grant that an acquire Txn whose reply never came (the
// caller's context ended, the connection broke, etcd said "request timed
// out") may have made, or may still make: etcd can apply such a request
// after the client gave up on it, even after a request sent later. It
// revokes the etcd lease the Txn puts the key on, so whichever etcd
// applies first, nothing stays granted: a revoke after the grant deletes
// its keys, and a Txn after the revoke fails (lease not found) and writes
// nothing. Without it, such a late grant held the lease for its whole TTL
// while its caller, having given up, had released "it" already (the
// workflows' cut-and-asked-again fault row on etcd, a 10.5 s stall).
//
// The caller waits for the revoke for at most unheardWait, so that what
// it does next (ask again, release by request id) finds the lease free;
// past that the revoke goes on in the background, and if it cannot reach
// etcd at all the grant expires with its TTL. A retry with the same
// request id that finds the grant before the revoke lands gets it, and
// then loses it visibly (its next renewal finds it gone).
func (s *Store) endUnheard(id clientv3.LeaseID) {
	done := make(chan struct{})
	if !s.background(func(ctx context.Context) {
		defer close(done)
		for d := 50 * time.Millisecond; ; d = min(2*d, time.Second) {
			_, err := s.cli.Revoke(ctx, id)
			if err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound) || backoff.Sleep(ctx, d) != nil {
				return
			}
		}
	}) {
		return
	}
	t := time.NewTimer(unheardWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// peek serves a TryAcquire of a name that this store has waiters for,
// which a queue makes sure to be refused: it reads the lease key and the
// queue's head in a read-only Txn (a refusal then costs no raft write; a
// Txn with a Put does, even when its compare fails). It returns nil when
// it did not read, or found the lease free and nobody queued: then the
// acquire Txn decides.
func (s *Store) peek(ctx context.Context, name string, first bool) (*clientv3.TxnResponse, error) {
	if !first || !s.hasWaiters(name) {
		return nil, nil
	}
	qp := s.queuePrefix(name)
	resp, err := s.cli.Txn(ctx).Then(opGetGrant(s.leaseKey(name)),
		clientv3.OpGet(qp, append(clientv3.WithFirstCreate(), clientv3.WithPrefix())...)).Commit()
	if err != nil {
		return nil, s.fail(ctx, "acquire", err)
	}
	if one(resp.Responses[0]) == nil && one(resp.Responses[1]) == nil {
		return nil, nil
	}
	return resp, nil
}

// reacquire serves a retried acquire (same owner and request id) that
// found its own grant. Refreshing the grant's etcd lease proves it has not
// expired; then the record is rewritten, if it has not changed since it
// was read, with the retry's data and TTL (on an etcd lease of the new
// length if that differs), keeping the token. done is false when the grant
// changed or ended meanwhile, and the caller starts over.
//
// The name is marked busy and the key checked unchanged before the
// refresh, so that a release overtaking this retry cannot hand the etcd
// lease to another grant before the refresh lands (see spares.go).
func (s *Store) reacquire(ctx context.Context, req leasehold.AcquireRequest, cg grant, cur record) (rec leasehold.Record, done bool, err error) {
	defer s.spares.enter(req.Name)()
	lk, kv, token := s.leaseKey(req.Name), cg.kv, uint64(cg.token)
	same, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(lk), "=", kv.ModRevision)).Commit()
	if err != nil {
		return rec, false, s.fail(ctx, "acquire", err)
	}
	if !same.Succeeded {
		return rec, false, nil
	}
	old, refreshed := clientv3.LeaseID(kv.Lease), time.Now()
	ka, err := s.cli.KeepAliveOnce(ctx, old)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return rec, false, nil // expired: its key goes with it
	}
	if err != nil {
		return rec, false, s.fail(ctx, "acquire", err)
	}
	s.spares.note(leaseRef{id: old, granted: ka.TTL, born: refreshed})
	cur.ttl, cur.data = req.TTL, req.Data
	secs, granted := leaseSeconds(req.TTL), ka.TTL
	puts, g, moved := []clientv3.Op{clientv3.OpPut(lk, cur.encode(), clientv3.WithIgnoreLease())}, grantLease{}, ka.TTL != secs
	if moved {
		if g, err = s.obtain(ctx, secs); err != nil {
			return rec, false, err
		}
		puts, granted = cg.moveTo(cur.encode(), g.id), g.granted
	}
	resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(lk), "=", kv.ModRevision)).Then(puts...).Commit()
	rerr := g.settle()
	switch {
	case err != nil:
		if moved {
			s.endUnheard(g.id) // the grant may have moved onto g: end it there
		}
		return rec, false, s.fail(ctx, "acquire", err)
	case !resp.Succeeded:
		if moved {
			s.unused(g, rerr)
		}
		return rec, false, nil
	case moved && rerr != nil:
		s.endUnheard(g.id)
		s.replaced(req.Name, old, false, nil)
		return rec, false, refreshFailed(ctx, token, rerr)
	case moved:
		s.used(g)
		s.spares.setGrant(req.Name, req.Owner, token, g.id)
		s.replaced(req.Name, old, false, nil)
	default:
		s.spares.setGrant(req.Name, req.Owner, token, old)
	}
	return leasehold.Record{
		Name: req.Name, Owner: req.Owner, Token: token, Data: bytes.Clone(req.Data),
		TTL: req.TTL, Remaining: time.Duration(granted) * time.Second, Acquired: cur.acquired,
	}, true, nil
}

func refreshFailed(ctx context.Context, token uint64, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("etcd acquire: granted (token %d) but its etcd lease could not be refreshed (%s); "+
		"the grant was ended, ask again", token, err.Error())
}

// Renew implements leasehold.Store: a read-only Txn checks that owner and
// token hold the latest grant and reads its key, then KeepAliveOnce
// refreshes the grant's etcd lease (two round trips; neither is a raft
// write). etcd refuses to refresh an expired lease, so a renewal can never
// revive one, and since every grant has an etcd lease of its own, a
// refresh that races with a release or takeover cannot extend anybody
// else's grant. A renewal with a different TTL also rewrites the record,
// moving it to an etcd lease of the new length if that differs.
func (s *Store) Renew(ctx context.Context, name, owner string, token uint64, ttl time.Duration) error {
	if err := storekit.ValidateRenew(name, owner, token, ttl); err != nil {
		return err
	}
	if err := s.begin(ctx); err != nil {
		return err
	}
	lk, ok := s.leaseKey(name), s.ownerKey(name)
	defer s.spares.enter(name)() // before reading the key: see spares.go
	if id, known := s.spares.grant(name, owner, token); known {
		if done, err := s.renewKnown(ctx, name, owner, token, ttl, id); done {
			return err
		}
	}
	for attempt := 0; attempt < maxAttempts; attempt++ {
		resp, err := s.cli.Txn(ctx).If(
			clientv3.Compare(clientv3.ModRevision(ok), "=", int64(token)),
			clientv3.Compare(clientv3.Value(ok), "=", owner),
			cmpToken(lk, int64(token)),
		).Then(opGetGrant(lk)).Commit()
		if err != nil {
			return s.fail(ctx, "renew", err)
		}
		if !resp.Succeeded {
			return leasehold.ErrNotHeld
		}
		cg, _, held := grantOf(resp.Responses[0].GetResponseRange().Kvs)
		if !held {
			return leasehold.ErrNotHeld
		}
		kv := cg.kv
		cur, err := decodeRecord(kv.Value)
		if err != nil {
			return err
		}
		old, refreshed := clientv3.LeaseID(kv.Lease), time.Now()
		ka, err := s.cli.KeepAliveOnce(ctx, old)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return leasehold.ErrNotHeld
		}
		if err != nil {
			return s.fail(ctx, "renew", err)
		}
		s.spares.note(leaseRef{id: old, granted: ka.TTL, born: refreshed})
		s.spares.setGrant(name, owner, token, old)
		if cur.ttl == ttl {
			return nil
		}
		done, err := s.retime(ctx, name, cg, cur, ttl, ka.TTL)
		if done || err != nil {
			return err
		}
	}
	return fmt.Errorf("etcd renew %q: the lease kept changing; gave up after %d attempts", name, maxAttempts)
}

// renewKnown renews a grant whose etcd lease id this store knows (it made
// or renewed the grant) in one round trip: it refreshes id while a
// read-only Txn checks that owner and token hold the latest grant and that
// its key is still on id. done is false when the Txn's check failed (the
// grant ended, or another process moved it to another etcd lease): Renew
// then reads the key first, as for a grant it does not know.
//
// The refresh and the check run at once, so a refresh may land on a lease
// that the grant no longer uses: one that another process released and,
// if it made that grant, reused for its next grant, which then lives
// longer than its TTL by up to one TTL (never shorter). A release in this
// store forgets the lease first, and does not reuse it while a renewal of
// the name is in flight here (see spares.go).
func (s *Store) renewKnown(ctx context.Context, name, owner string, token uint64, ttl time.Duration, id clientv3.LeaseID) (done bool, err error) {
	lk, ok := s.leaseKey(name), s.ownerKey(name)
	refreshed := time.Now()
	ref, known := s.spares.knownRef(id)
	granted := ref.granted
	// The shared stream only for a lease surely unexpired (see refresh.go).
	stream := known && time.Until(ref.born.Add(time.Duration(ref.granted)*time.Second*99/100)) > time.Second
	ch := make(chan error, 1)
	go func() {
		if stream {
			ch <- s.refresher.refresh(ctx, id)
			return
		}
		ka, err := s.cli.KeepAliveOnce(ctx, id)
		if err == nil {
			granted = ka.TTL
		}
		ch <- err
	}()
	resp, err := s.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(ok), "=", int64(token)),
		clientv3.Compare(clientv3.Value(ok), "=", owner),
		cmpToken(lk, int64(token)),
		clientv3.Compare(clientv3.LeaseValue(lk), "=", int64(id)),
	).Then(opGetGrant(lk)).Commit()
	rerr := <-ch
	cg, _, held := grant{}, 0, false
	if err == nil && resp.Succeeded {
		cg, _, held = grantOf(resp.Responses[0].GetResponseRange().Kvs)
	}
	switch {
	case err != nil:
		return true, s.fail(ctx, "renew", err)
	case !resp.Succeeded || !held:
		s.spares.setGrant(name, "", 0, clientv3.NoLease)
		return false, nil
	case errors.Is(rerr, rpctypes.ErrLeaseNotFound):
		return true, leasehold.ErrNotHeld // expired: etcd refuses to revive it
	case rerr != nil:
		return true, s.fail(ctx, "renew", rerr)
	}
	s.spares.note(leaseRef{id: id, granted: granted, born: refreshed})
	cur, err := decodeRecord(cg.kv.Value)
	if err != nil || cur.ttl == ttl {
		return true, err
	}
	return s.retime(ctx, name, cg, cur, ttl, granted)
}

// retime rewrites a live grant's record with a new TTL, on an etcd lease
// of the new length if that differs from granted (seconds). done is false
// when the key changed since kv was read.
func (s *Store) retime(ctx context.Context, name string, cg grant, cur record, ttl time.Duration, granted int64) (done bool, err error) {
	lk, kv := s.leaseKey(name), cg.kv
	cur.ttl = ttl
	secs := leaseSeconds(ttl)
	puts, g, moved := []clientv3.Op{clientv3.OpPut(lk, cur.encode(), clientv3.WithIgnoreLease())}, grantLease{}, granted != secs
	if moved {
		if g, err = s.obtain(ctx, secs); err != nil {
			return false, err
		}
		puts = cg.moveTo(cur.encode(), g.id)
	}
	resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(lk), "=", kv.ModRevision)).Then(puts...).Commit()
	rerr := g.settle()
	switch {
	case err != nil:
		return false, s.fail(ctx, "renew", err)
	case !resp.Succeeded:
		if moved {
			s.unused(g, rerr)
		}
		return false, nil
	case moved && rerr != nil:
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return false, fmt.Errorf("etcd renew: the new etcd lease could not be refreshed: %s", rerr.Error())
	case moved:
		s.used(g)
		s.spares.setGrant(name, cur.owner, uint64(cg.token), g.id)
		s.replaced(name, clientv3.LeaseID(kv.Lease), false, nil)
	}
	return true, nil
}
