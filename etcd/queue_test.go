package etcd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/randid"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// queueURL returns the shared etcd's URL with a fresh key prefix, whose
// keys are deleted when the test ends.
func queueURL(t *testing.T) string {
	base := enginetest.EtcdURL(t)
	prefix := "leasehold-test/q-" + randid.Hex(6) + "/"
	t.Cleanup(func() {
		s, err := Open(context.Background(), base)
		if err != nil {
			return
		}
		defer s.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = s.cli.Delete(ctx, prefix, clientv3.WithPrefix())
	})
	return base + "/?prefix=" + url.QueryEscape(prefix)
}

func openStore(t *testing.T, u string, opts ...Option) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Open(ctx, u, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// queued returns the owners of name's queue entries, oldest first.
func queued(t *testing.T, s *Store, name string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := s.cli.Get(ctx, s.queuePrefix(name), append(clientv3.WithFirstCreate(), clientv3.WithPrefix(), clientv3.WithLimit(0))...)
	if err != nil {
		t.Fatal(err)
	}
	var owners []string
	for _, kv := range resp.Kvs {
		r, _, err := decodeEntry(kv.Value)
		if err != nil {
			t.Fatal(err)
		}
		owners = append(owners, r.owner)
	}
	return owners
}

// waitQueued waits until name has n queue entries.
func waitQueued(t *testing.T, s *Store, name string, n int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		if got := queued(t, s, name); len(got) == n {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("queue of %q: %v, want %d entries", name, got, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestQueueRangeCompare: etcd compares CreateRevision = 0 over an empty
// key range as true, and over a range holding a key as false; >= over a
// range holds only if every key in it does. The queue relies on both.
func TestQueueRangeCompare(t *testing.T) {
	s := openStore(t, queueURL(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	qp := s.queuePrefix("n")
	txn := func(c clientv3.Cmp) bool {
		r, err := s.cli.Txn(ctx).If(c).Commit()
		if err != nil {
			t.Fatal(err)
		}
		return r.Succeeded
	}
	if !txn(cmpQueueEmpty(qp)) {
		t.Fatal("an empty range does not compare empty")
	}
	// A name that extends this one ("n" + "x") is not in the range.
	if _, err := s.cli.Put(ctx, s.queuePrefix("nx")+"k", "v"); err != nil {
		t.Fatal(err)
	}
	if !txn(cmpQueueEmpty(qp)) {
		t.Fatal("another name's entry is in the range")
	}
	a, err := s.cli.Put(ctx, qp+"a", "v")
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.cli.Put(ctx, qp+"b", "v")
	if err != nil {
		t.Fatal(err)
	}
	if txn(cmpQueueEmpty(qp)) {
		t.Fatal("a range with keys compares empty")
	}
	ge := func(rev int64) bool {
		return txn(clientv3.Compare(clientv3.CreateRevision(qp), ">", rev-1).WithPrefix())
	}
	if !ge(a.Header.Revision) || ge(b.Header.Revision) {
		t.Fatalf(">= over the range: %v at the first key's revision, %v at the second's", ge(a.Header.Revision), ge(b.Header.Revision))
	}
}

// TestQueueFIFO: 8 waiters, each on a store (connection) of its own,
// queue one after another behind a holder; after its release they get the
// lease in exactly their arrival order, each woken at most twice (by its
// predecessor leaving the queue, then by the release or the grant handed
// to it), never by the other waiters' turns. The first sends one acquire
// Txn; the others are handed the lease by their predecessor's release.
func TestQueueFIFO(t *testing.T) {
	u := queueURL(t)
	hs := openStore(t, u)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	holder, err := hs.TryAcquire(ctx, leasehold.AcquireRequest{Name: "fifo", Owner: "holder", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	var mu sync.Mutex
	var order []string
	stats := map[string][2]int{}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		s := openStore(t, u)
		s.waitHook = func(req leasehold.AcquireRequest, wakes, acquires int) {
			mu.Lock()
			stats[req.Owner] = [2]int{wakes, acquires}
			mu.Unlock()
		}
		owner := fmt.Sprintf("w%d", i)
		c, err := leasehold.New(s, leasehold.WithOwner(owner))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Acquire(ctx, "fifo", leasehold.TTL(10*time.Second))
			if err != nil {
				errs <- fmt.Errorf("%s: %w", owner, err)
				return
			}
			mu.Lock()
			order = append(order, owner)
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
			if err := l.Release(ctx); err != nil {
				errs <- err
			}
		}()
		waitQueued(t, hs, "fifo", i+1)
	}
	if got := queued(t, hs, "fifo"); fmt.Sprint(got) != "[w0 w1 w2 w3 w4 w5 w6 w7]" {
		t.Fatalf("queue = %v", got)
	}
	if err := hs.Release(ctx, "fifo", "holder", holder.Token); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if fmt.Sprint(order) != "[w0 w1 w2 w3 w4 w5 w6 w7]" {
		t.Errorf("grants in order %v, want arrival order", order)
	}
	for owner, st := range stats {
		// w0 takes the lease after the holder's plain release (its store
		// has not seen the queue); with the handoff in the release on,
		// each later waiter is handed it by its predecessor's release and
		// writes nothing (the default); off (handOffOnRelease), each
		// acquires once after its predecessor's release.
		want := 1
		if handOffOnRelease && owner != "w0" {
			want = 0
		}
		if st[1] != want || st[0] > 2 {
			t.Errorf("%s was woken %d times and sent %d acquire Txns; want at most 2 and exactly %d", owner, st[0], st[1], want)
		}
	}
	if len(stats) != n {
		t.Errorf("%d waiters reported, want %d", len(stats), n)
	}
	if got := queued(t, hs, "fifo"); len(got) != 0 {
		t.Errorf("entries left: %v", got)
	}
}

// TestQueueKilledWaiter: a waiter whose process dies (its etcd client is
// closed under it, so nothing removes its entry) blocks the queue only
// until etcd expires its session lease. Meanwhile TryAcquire of the free
// lease is refused, naming the dead head; then the live waiter behind it
// gets the lease.
func TestQueueKilledWaiter(t *testing.T) {
	u := queueURL(t)
	hs := openStore(t, u)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	holder, err := hs.TryAcquire(ctx, leasehold.AcquireRequest{Name: "k", Owner: "holder", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// The doomed waiter, on a client of its own.
	cli, err := clientv3.New(clientv3.Config{Endpoints: hs.cli.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	ds, err := New(cli, WithPrefix(hs.Prefix()), WithQueueLiveness(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	dead := make(chan error, 1)
	go func() {
		_, err := ds.AcquireWait(ctx, leasehold.AcquireRequest{Name: "k", Owner: "doomed", RequestID: "d1", TTL: 10 * time.Second})
		dead <- err
	}()
	waitQueued(t, hs, "k", 1)
	live := openStore(t, u)
	got := make(chan leasehold.Record, 1)
	go func() {
		rec, err := live.AcquireWait(ctx, leasehold.AcquireRequest{Name: "k", Owner: "live", RequestID: "l1", TTL: 10 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- rec
	}()
	waitQueued(t, hs, "k", 2)
	cli.Close() // the doomed process dies
	killed := time.Now()
	if q := queued(t, hs, "k"); fmt.Sprint(q) != "[doomed live]" {
		t.Fatalf("after the kill the queue is %v, want the dead entry left", q)
	}
	released := time.Now()
	if err := hs.Release(ctx, "k", "holder", holder.Token); err != nil {
		t.Fatal(err)
	}
	// Free, but the dead head is queued: no overtaking. Usually the head
	// is only queued (token 0). It may also hold the lease (CI run 61, on
	// a loaded machine: "held by "doomed" (token 130)"); the likely way,
	// found by reading: its waiter, whose watch ends as its client closes,
	// sends one more acquire before the connection is gone, and etcd may
	// apply it after the release. That
	// grant is the head's turn, on its prepared etcd lease, which nobody
	// refreshes any more: it ends with that lease.
	_, err = hs.TryAcquire(ctx, leasehold.AcquireRequest{Name: "k", Owner: "intruder", TTL: time.Minute})
	var he *leasehold.HeldError
	if !errors.As(err, &he) || he.Owner != "doomed" || (he.Token != 0 && he.Token <= holder.Token) || he.Remaining <= 0 {
		t.Fatalf("TryAcquire with a queue: %v, want a HeldError naming the head", err)
	}
	if he.Token != 0 {
		t.Logf("the dead head's last acquire was applied after the release (token %d)", he.Token)
	}
	if err := <-dead; err == nil {
		t.Fatal("the doomed waiter was granted")
	}
	var rec leasehold.Record
	select {
	case rec = <-got:
	case <-time.After(45 * time.Second):
		t.Fatal("the live waiter never got the lease")
	}
	took := time.Since(released)
	if rec.Owner != "live" || rec.Token <= max(holder.Token, he.Token) {
		t.Fatalf("granted %+v", rec)
	}
	if took > 30*time.Second {
		t.Errorf("the dead entry blocked the queue for %s with a 5s liveness window", took)
	}
	_, err = hs.TryAcquire(ctx, leasehold.AcquireRequest{Name: "k", Owner: "intruder", TTL: time.Minute})
	if !errors.As(err, &he) || he.Owner != "live" || he.Token != rec.Token {
		t.Fatalf("TryAcquire after the grant: %v", err)
	}
	t.Logf("the dead waiter's entry held the queue for %s after the release, %s after the kill (liveness 5s)",
		took.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
}

// TestQueueCancel: a waiter whose ctx ends leaves no entry, and the next
// waiter moves up.
func TestQueueCancel(t *testing.T) {
	u := queueURL(t)
	s := openStore(t, u)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "c", Owner: "holder", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := s.AcquireWait(wctx, leasehold.AcquireRequest{Name: "c", Owner: "quitter", RequestID: "q", TTL: time.Minute})
		done <- err
	}()
	waitQueued(t, s, "c", 1)
	other := openStore(t, u)
	got := make(chan error, 1)
	go func() {
		_, err := other.AcquireWait(ctx, leasehold.AcquireRequest{Name: "c", Owner: "stayer", RequestID: "s", TTL: time.Minute})
		got <- err
	}()
	waitQueued(t, s, "c", 2)
	wcancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled AcquireWait = %v", err)
	}
	if q := queued(t, s, "c"); fmt.Sprint(q) != "[stayer]" {
		t.Fatalf("after the cancel the queue is %v", q)
	}
	if err := s.Release(ctx, "c", "holder", holder.Token); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if r, err := s.Get(ctx, "c"); err != nil || r.Owner != "stayer" {
		t.Fatalf("after the release: %+v, %v", r, err)
	}
	if q := queued(t, s, "c"); len(q) != 0 {
		t.Fatalf("entries left: %v", q)
	}
}

func TestQueueLivenessOption(t *testing.T) {
	for _, d := range []time.Duration{0, time.Millisecond, 2 * time.Hour} {
		if _, err := New(&clientv3.Client{}, WithQueueLiveness(d)); !errors.Is(err, leasehold.ErrInvalid) {
			t.Errorf("WithQueueLiveness(%s): %v", d, err)
		}
	}
	for _, q := range []string{"queue_liveness=0s", "queue_liveness=soon", "queue_liveness=2h"} {
		if _, _, err := parseURL("etcd://127.0.0.1:2379/?" + q); !errors.Is(err, leasehold.ErrInvalid) {
			t.Errorf("%s: %v", q, err)
		}
	}
}

// metric reads a counter or gauge from etcd's /metrics.
func metric(t *testing.T, srv *enginetest.Server, name string) float64 {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", srv.Port))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("etcd has no metric %s", name)
	return 0
}

// TestQueueQuietRelease: on a private etcd, acquires and releases without
// a waiter (through Client.Acquire, TryAcquire and AcquireWait) make etcd
// send no watch event at all and keep no watcher; a release with a queued
// waiter does send events (the head's watch).
func TestQueueQuietRelease(t *testing.T) {
	srv := enginetest.StartEtcd(t)
	s := openStore(t, srv.EtcdURL()+"/?prefix=q/")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := leasehold.New(s, leasehold.WithOwner("solo"))
	if err != nil {
		t.Fatal(err)
	}
	events := metric(t, srv, "etcd_debugging_mvcc_events_total")
	for i := 0; i < 20; i++ {
		l, err := c.Acquire(ctx, "quiet", leasehold.TTL(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		rec, err := s.AcquireWait(ctx, leasehold.AcquireRequest{Name: "quiet", Owner: "solo", RequestID: fmt.Sprint(i), TTL: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, "quiet", "solo", rec.Token); err != nil {
			t.Fatal(err)
		}
	}
	if got := metric(t, srv, "etcd_debugging_mvcc_events_total") - events; got != 0 {
		t.Errorf("40 uncontended pairs made etcd send %v watch events", got)
	}
	if w := metric(t, srv, "etcd_debugging_mvcc_watcher_total"); w != 0 {
		t.Errorf("%v watchers after uncontended pairs", w)
	}
	// The control: a waiter is woken by a release.
	rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "quiet", Owner: "holder", TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		r, err := s.AcquireWait(ctx, leasehold.AcquireRequest{Name: "quiet", Owner: "waiter", RequestID: "w", TTL: 5 * time.Second})
		if err == nil {
			err = s.Release(ctx, "quiet", "waiter", r.Token)
		}
		got <- err
	}()
	waitQueued(t, s, "quiet", 1)
	events = metric(t, srv, "etcd_debugging_mvcc_events_total")
	if err := s.Release(ctx, "quiet", "holder", rec.Token); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if d := metric(t, srv, "etcd_debugging_mvcc_events_total") - events; d < 1 {
		t.Errorf("a release with a waiter sent %v watch events", d)
	}
}
