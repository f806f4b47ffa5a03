package etcd

import (
	"context"
	"net/url"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// TestRecycle: a store that acquires and releases in turn reuses the
// released grants' etcd leases instead of granting and revoking one per
// pair; but not while a renewal of that name is in flight.
func TestRecycle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := "leasehold-test/recycle-" + time.Now().Format("150405.000000") + "/"
	s, err := Open(ctx, enginetest.EtcdURL(t)+"/?prefix="+url.QueryEscape(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	defer s.cli.Delete(context.Background(), prefix, clientv3.WithPrefix())
	leaseOf := func(name string) clientv3.LeaseID {
		r, err := s.cli.Get(ctx, s.leaseKey(name))
		if err != nil || len(r.Kvs) != 1 {
			t.Fatalf("lease key of %q: %v, %v", name, r, err)
		}
		return clientv3.LeaseID(r.Kvs[0].Lease)
	}
	ids := map[clientv3.LeaseID]bool{}
	for i := 0; i < 50; i++ {
		rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "x", Owner: "o", TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ids[leaseOf("x")] = true
		if err := s.Release(ctx, "x", "o", rec.Token); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond) // let a background refill land
	}
	if len(ids) > maxSparesPerTTL {
		t.Errorf("50 pairs used %d etcd leases; want the released ones reused", len(ids))
	}

	rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "busy", Owner: "o", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	id := leaseOf("busy")
	leave := s.spares.enter("busy") // as a renewal in flight would
	err = s.Release(ctx, "busy", "o", rec.Token)
	leave()
	if err != nil {
		t.Fatal(err)
	}
	for _, sp := range s.spares.drain() {
		if sp.id == id {
			t.Fatal("a lease released during a renewal of its name became a spare")
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		r, err := s.cli.TimeToLive(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if r.TTL == -1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lease released during a renewal was not revoked (TTL %d)", r.TTL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
