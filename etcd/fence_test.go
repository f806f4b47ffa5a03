package etcd_test

import (
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/etcd"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// TestFencedPut: a holder whose lease was taken over cannot overwrite what
// its successor wrote; equal and newer tokens can write.
func TestFencedPut(t *testing.T) {
	s := open(t, freshURL(t, enginetest.EtcdURL(t)))
	defer s.Close()
	ctx := ctxFor(t, time.Minute)
	cli := s.Client()
	key := s.Prefix() + "resource"

	old, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "res", Owner: "old", TTL: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := etcd.FencedPut(ctx, cli, key, "old 1", old.Token); err != nil {
		t.Fatalf("first fenced write: %v", err)
	}
	// The old holder stalls; its lease expires and is taken over.
	ch, err := s.Watch(ctx, "res")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatal("the old grant did not expire")
	}
	cur, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "res", Owner: "new", TTL: time.Minute})
	if err != nil || cur.Token <= old.Token {
		t.Fatalf("takeover: %+v, %v", cur, err)
	}
	if err := etcd.FencedPut(ctx, cli, key, "new 1", cur.Token); err != nil {
		t.Fatalf("successor's write: %v", err)
	}
	err = etcd.FencedPut(ctx, cli, key, "old 2", old.Token)
	if !errors.Is(err, etcd.ErrFenced) || !errors.Is(err, leasehold.ErrLost) {
		t.Fatalf("stale write: %v, want ErrFenced", err)
	}
	if err := etcd.FencedPut(ctx, cli, key, "new 2", cur.Token); err != nil {
		t.Errorf("second write with the same token: %v", err)
	}
	got, err := cli.Get(ctx, key)
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "new 2" {
		t.Fatalf("value = %v, %v; want the successor's", got.Kvs, err)
	}
	// FencedTxn applies several ops together, or none.
	err = etcd.FencedTxn(ctx, cli, key, old.Token, clientv3.OpPut(key, "old 3"), clientv3.OpPut(key+"/b", "x"))
	if !errors.Is(err, etcd.ErrFenced) {
		t.Errorf("stale FencedTxn: %v", err)
	}
	if r, _ := cli.Get(ctx, key+"/b"); len(r.Kvs) != 0 {
		t.Error("a refused FencedTxn wrote one of its ops")
	}
	if err := etcd.FencedPut(ctx, cli, key, "x", 0); !errors.Is(err, leasehold.ErrInvalid) {
		t.Errorf("token 0: %v, want ErrInvalid", err)
	}

	// HeldCmp: writes only while the grant is live.
	held := func(tok uint64) bool {
		r, err := cli.Txn(ctx).If(s.HeldCmp("res", tok)).Then(clientv3.OpPut(key+"/held", "y")).Commit()
		if err != nil {
			t.Fatal(err)
		}
		return r.Succeeded
	}
	if !held(cur.Token) || held(old.Token) {
		t.Errorf("HeldCmp: current %v, old %v; want true, false", held(cur.Token), held(old.Token))
	}
	if err := s.Release(ctx, "res", "new", cur.Token); err != nil {
		t.Fatal(err)
	}
	if held(cur.Token) {
		t.Error("HeldCmp holds after release")
	}
}
