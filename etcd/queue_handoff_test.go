package etcd

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// revision reads etcd's current revision.
func revision(t *testing.T, s *Store) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := s.cli.Get(ctx, "leasehold-test/revision")
	if err != nil {
		t.Fatal(err)
	}
	return r.Header.Revision
}

type waitResult struct {
	rec leasehold.Record
	err error
}

// waitFor starts an AcquireWait and returns its result's channel.
func waitFor(ctx context.Context, s *Store, req leasehold.AcquireRequest) chan waitResult {
	ch := make(chan waitResult, 1)
	go func() {
		rec, err := s.AcquireWait(ctx, req)
		ch <- waitResult{rec, err}
	}()
	return ch
}

// TestQueueHandoffOneWrite: on a private etcd (nothing else writes), a
// release by a holder that got the lease by queueing hands it to the next
// waiter in one write: etcd's revision moves by exactly 1 from before the
// release to the waiter's return (it moved by 2 when the head acquired
// after the release). The handed-over grant's token is that revision,
// above every earlier token; Get, Renew and HeldCmp see it, and its
// release ends it.
func TestQueueHandoffOneWrite(t *testing.T) {
	handOffFor(t)
	srv := enginetest.StartEtcd(t)
	u := srv.EtcdURL() + "/?prefix=h/"
	hs, s1, s2 := openStore(t, u), openStore(t, u), openStore(t, u)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := hs.TryAcquire(ctx, leasehold.AcquireRequest{Name: "n", Owner: "h", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w1 := waitFor(ctx, s1, leasehold.AcquireRequest{Name: "n", Owner: "w1", RequestID: "r1", TTL: 10 * time.Second})
	waitQueued(t, hs, "n", 1)
	w2 := waitFor(ctx, s2, leasehold.AcquireRequest{Name: "n", Owner: "w2", RequestID: "r2", TTL: 7 * time.Second, Data: []byte("d2")})
	waitQueued(t, hs, "n", 2)
	if err := hs.Release(ctx, "n", "h", h.Token); err != nil {
		t.Fatal(err)
	}
	r1 := <-w1
	if r1.err != nil {
		t.Fatal(r1.err)
	}
	before := revision(t, hs)
	if err := s1.Release(ctx, "n", "w1", r1.rec.Token); err != nil {
		t.Fatal(err)
	}
	r2 := <-w2
	if r2.err != nil {
		t.Fatal(r2.err)
	}
	after := revision(t, hs)
	if after-before != 1 {
		t.Errorf("the handoff from w1 to w2 moved etcd's revision by %d (%d to %d), want 1 write", after-before, before, after)
	}
	if !(h.Token < r1.rec.Token && r1.rec.Token < r2.rec.Token) {
		t.Errorf("tokens %d, %d, %d do not increase", h.Token, r1.rec.Token, r2.rec.Token)
	}
	if r2.rec.Owner != "w2" || r2.rec.TTL != 7*time.Second || string(r2.rec.Data) != "d2" || r2.rec.Remaining <= 0 || r2.rec.Remaining > 7*time.Second {
		t.Errorf("w2's grant: %+v", r2.rec)
	}
	if got, err := hs.Get(ctx, "n"); err != nil || got.Owner != "w2" || got.Token != r2.rec.Token || string(got.Data) != "d2" || got.TTL != 7*time.Second {
		t.Errorf("Get after the handoff: %+v, %v", got, err)
	}
	if q := queued(t, hs, "n"); len(q) != 0 {
		t.Errorf("entries left: %v", q)
	}
	held := func(token uint64) bool {
		r, err := hs.cli.Txn(ctx).If(hs.HeldCmp("n", token)).Commit()
		if err != nil {
			t.Fatal(err)
		}
		return r.Succeeded
	}
	if !held(r2.rec.Token) || held(r1.rec.Token) {
		t.Errorf("HeldCmp: w2's token %v, w1's %v; want true, false", held(r2.rec.Token), held(r1.rec.Token))
	}
	if err := s1.Renew(ctx, "n", "w1", r1.rec.Token, 10*time.Second); !errors.Is(err, leasehold.ErrNotHeld) {
		t.Errorf("w1's renewal after its release: %v", err)
	}
	if err := s2.Renew(ctx, "n", "w2", r2.rec.Token, 7*time.Second); err != nil {
		t.Errorf("w2's renewal: %v", err)
	}
	if err := hs.Renew(ctx, "n", "w2", r2.rec.Token, 9*time.Second); err != nil { // another store, a new TTL
		t.Errorf("w2's renewal with a new TTL from another store: %v", err)
	}
	if err := s1.Release(ctx, "n", "w1", r1.rec.Token); !errors.Is(err, leasehold.ErrNotHeld) {
		t.Errorf("w1's second release: %v", err)
	}
	if err := s2.Release(ctx, "n", "w2", r2.rec.Token); err != nil {
		t.Fatal(err)
	}
	if held(r2.rec.Token) {
		t.Error("HeldCmp holds after the release")
	}
	if _, err := hs.Get(ctx, "n"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Errorf("Get after the last release: %v", err)
	}
	r3, err := hs.TryAcquire(ctx, leasehold.AcquireRequest{Name: "n", Owner: "h", TTL: 10 * time.Second})
	if err != nil || r3.Token <= r2.rec.Token {
		t.Fatalf("TryAcquire after the handoffs: %+v, %v", r3, err)
	}
}

// TestQueueHandoffCancelled: a waiter whose wait ends while a release
// hands it the lease gives the grant back: after AcquireWait returned an
// error, the waiter holds nothing (the release and the cancel race; each
// round either may win).
func TestQueueHandoffCancelled(t *testing.T) {
	handOffFor(t)
	u := queueURL(t)
	hs, ws := openStore(t, u), openStore(t, u)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	handed, cancelled, handedOver := 0, 0, 0
	for i := 0; i < 12; i++ {
		name := fmt.Sprint("c", i)
		h, err := hs.TryAcquire(ctx, leasehold.AcquireRequest{Name: name, Owner: "h", TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		hs.noteQueue(name, true) // as for a holder that queued: its release hands over
		wctx, wcancel := context.WithCancel(ctx)
		w := waitFor(wctx, ws, leasehold.AcquireRequest{Name: name, Owner: "w", RequestID: "r", TTL: 10 * time.Second})
		waitQueued(t, hs, name, 1)
		time.Sleep(time.Duration(i%3) * 5 * time.Millisecond) // the head's watch may or may not be set up yet
		from := revision(t, hs)
		released := make(chan error, 1)
		go func() { released <- hs.Release(ctx, name, "h", h.Token) }()
		time.Sleep(time.Duration(i%4) * 500 * time.Microsecond)
		wcancel()
		if err := <-released; err != nil {
			t.Fatal(err)
		}
		r := <-w
		// Was the lease handed to w (a revision at which the lease key is w's)?
		for rev := from + 1; rev <= revision(t, hs); rev++ {
			g, err := hs.cli.Get(ctx, hs.leaseKey(name), clientv3.WithRev(rev))
			if err != nil {
				t.Fatal(err)
			}
			if len(g.Kvs) > 0 {
				if rec, err := decodeRecord(g.Kvs[0].Value); err == nil && rec.owner == "w" {
					handedOver++
					break
				}
			}
		}
		if r.err == nil {
			handed++
			if err := ws.Release(ctx, name, "w", r.rec.Token); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if !errors.Is(r.err, context.Canceled) {
			t.Fatalf("round %d: %v", i, r.err)
		}
		cancelled++
		if got, err := hs.Get(ctx, name); !errors.Is(err, leasehold.ErrNotFound) {
			t.Errorf("round %d: after the cancelled wait returned, the lease is %+v, %v; want free", i, got, err)
		}
		if q := queued(t, hs, name); len(q) != 0 {
			t.Errorf("round %d: entries left: %v", i, q)
		}
	}
	t.Logf("%d rounds granted before the cancel, %d cancelled; in %d the lease was handed to the waiter", handed, cancelled, handedOver)
}

// TestQueueHandoffDeadHead: a waiter whose process died (its etcd client
// closed) is the head when the lease is released.
//   - Its prepared etcd lease is gone (revoked here, as etcd does when it
//     expires): the release's Txn is refused and the release deletes the
//     lease as a plain one; the dead entry holds the queue until its
//     session expires, as before handoffs, and no grant is made to it.
//   - Its prepared lease is still alive (it died less than its TTL ago):
//     the lease is handed to it, and the grant ends when that etcd lease
//     expires (within its 6 s TTL of the waiter's last refresh); then the
//     live waiter behind it gets the lease. (With a TTL of 2 s, CI run 53,
//     in the race stage on a loaded 2-core machine, had the prepared lease
//     expire before the release: the dead head held the queue only until
//     its session ended, as in the first case, and no grant was made.)
func TestQueueHandoffDeadHead(t *testing.T) {
	handOffFor(t)
	for _, revoke := range []bool{true, false} {
		t.Run(fmt.Sprint("revoked=", revoke), func(t *testing.T) {
			u := queueURL(t)
			hs := openStore(t, u)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			h, err := hs.TryAcquire(ctx, leasehold.AcquireRequest{Name: "k", Owner: "holder", TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			hs.noteQueue("k", true)
			cli, err := clientv3.New(clientv3.Config{Endpoints: hs.cli.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
			if err != nil {
				t.Fatal(err)
			}
			ds, err := New(cli, WithPrefix(hs.Prefix()), WithQueueLiveness(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			dead := waitFor(ctx, ds, leasehold.AcquireRequest{Name: "k", Owner: "doomed", RequestID: "d", TTL: 6 * time.Second})
			waitQueued(t, hs, "k", 1)
			live := waitFor(ctx, openStore(t, u), leasehold.AcquireRequest{Name: "k", Owner: "live", RequestID: "l", TTL: 10 * time.Second})
			waitQueued(t, hs, "k", 2)
			resp, err := hs.cli.Get(ctx, hs.queuePrefix("k"), append(clientv3.WithFirstCreate(), clientv3.WithPrefix())...)
			if err != nil || len(resp.Kvs) == 0 {
				t.Fatal(resp, err)
			}
			_, prepared, err := decodeEntry(resp.Kvs[0].Value)
			if err != nil || prepared == clientv3.NoLease {
				t.Fatalf("the head's entry names no prepared lease: %v, %v", prepared, err)
			}
			cli.Close() // the doomed process dies
			if revoke {
				if _, err := hs.cli.Revoke(ctx, prepared); err != nil {
					t.Fatal(err)
				}
			}
			released := time.Now()
			if err := hs.Release(ctx, "k", "holder", h.Token); err != nil {
				t.Fatal(err)
			}
			var he *leasehold.HeldError
			_, err = hs.TryAcquire(ctx, leasehold.AcquireRequest{Name: "k", Owner: "intruder", TTL: time.Minute})
			if !errors.As(err, &he) || he.Owner != "doomed" {
				t.Fatalf("TryAcquire after the release: %v, want a HeldError naming the dead head", err)
			}
			if revoke && he.Token != 0 {
				t.Errorf("the dead head whose prepared lease was gone was granted (token %d)", he.Token)
			}
			if !revoke && he.Token <= h.Token {
				t.Errorf("the dead head with a live prepared lease: token %d, want a grant above %d", he.Token, h.Token)
			}
			if r := <-dead; r.err == nil {
				t.Fatal("the doomed waiter returned a grant")
			}
			var r waitResult
			select {
			case r = <-live:
			case <-time.After(45 * time.Second):
				t.Fatal("the live waiter never got the lease")
			}
			took := time.Since(released)
			if r.err != nil || r.rec.Owner != "live" || r.rec.Token <= max(h.Token, he.Token) {
				t.Fatalf("the live waiter: %+v, %v", r.rec, r.err)
			}
			if took > 30*time.Second {
				t.Errorf("the dead head held the queue for %s", took)
			}
			t.Logf("the dead head held the queue for %s after the release", took.Round(time.Millisecond))
		})
	}
}

// TestQueueHandedUnrefreshed: a grant handed over on a prepared etcd lease
// whose refresh had failed is kept only after a refresh now succeeds (so
// it lives a TTL past the wait's start); if the lease is gone, the waiter
// keeps nothing and queues again.
func TestQueueHandedUnrefreshed(t *testing.T) {
	s := openStore(t, queueURL(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, gone := range []bool{false, true} {
		name := fmt.Sprint("u", gone)
		lr, err := s.cli.Grant(ctx, 5)
		if err != nil {
			t.Fatal(err)
		}
		lk := s.leaseKey(name)
		val := record{owner: "w", requestID: "r", ttl: 5 * time.Second, acquired: time.Now()}.encode()
		put, err := s.cli.Txn(ctx).Then(clientv3.OpPut(lk, val, clientv3.WithLease(lr.ID)),
			clientv3.OpPut(tokenKey(lk, 1), "", clientv3.WithLease(lr.ID)), clientv3.OpPut(s.ownerKey(name), "w")).Commit()
		if err != nil {
			t.Fatal(err)
		}
		kv := &mvccpb.KeyValue{Key: []byte(lk), Value: []byte(val), Lease: int64(lr.ID), ModRevision: put.Header.Revision}
		if gone {
			if _, err := s.cli.Revoke(ctx, lr.ID); err != nil {
				t.Fatal(err)
			}
		}
		born := time.Now().Add(-time.Hour) // not known to be refreshed after the wait began
		w := &waiter{s: s, octx: ctx, req: leasehold.AcquireRequest{Name: name, Owner: "w", RequestID: "r", TTL: 5 * time.Second},
			lk: lk, next: grantLease{leaseRef: leaseRef{id: lr.ID, granted: 5, born: born}, secs: 5}, prepDead: true}
		rec, done, err := w.handed(ctx, kv, put.Header.Revision)
		switch {
		case gone && (done || err != nil || w.next.id != clientv3.NoLease):
			t.Errorf("lease gone: handed = %+v, %v, %v; want not done, the lease dropped", rec, done, err)
		case !gone && (!done || err != nil || rec.Token != uint64(put.Header.Revision) || rec.Remaining < 4*time.Second):
			t.Errorf("lease alive: handed = %+v, %v, %v; want the grant, refreshed", rec, done, err)
		}
	}
}

// handOffFor makes sure the handoff in the release is on for t (see
// handOffOnRelease).
func handOffFor(t *testing.T) {
	was := handOffOnRelease
	handOffOnRelease = true
	t.Cleanup(func() { handOffOnRelease = was })
}
