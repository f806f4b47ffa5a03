package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/redis"
)

// queueFixture is a prefix on the test server, a raw client to inspect its
// keys, and a way to open stores on it (each its own connection pool and
// subscription: a separate process as far as Redis can tell).
type queueFixture struct {
	t      *testing.T
	url    string
	prefix string
	rdb    *goredis.Client
}

func newQueueFixture(t *testing.T) *queueFixture {
	url := sharedURL(t)
	opt, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := goredis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	return &queueFixture{t: t, url: url, prefix: uniquePrefix(t), rdb: rdb}
}

func (f *queueFixture) open(opts ...redis.Option) *redis.Store {
	f.t.Helper()
	s := open(f.t, f.url, append([]redis.Option{redis.WithKeyPrefix(f.prefix), redis.WithHoldback(0)}, opts...)...)
	f.t.Cleanup(func() { s.Close() })
	return s
}

// key is one of a name's keys ("" the lease, ":q" the queue, ":w" the
// waiters, ":i" the Watch interest marker); names here have no braces.
func (f *queueFixture) key(name, suffix string) string {
	return f.prefix + "{" + name + "}" + suffix
}

// queued returns the waiter ids queued for name, in order.
func (f *queueFixture) queued(ctx context.Context, name string) []string {
	f.t.Helper()
	ids, err := f.rdb.ZRange(ctx, f.key(name, ":q"), 0, -1).Result()
	if err != nil {
		f.t.Fatal(err)
	}
	return ids
}

// waitQueued waits until name's queue holds n entries.
func (f *queueFixture) waitQueued(ctx context.Context, name string, n int) {
	f.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for len(f.queued(ctx, name)) != n {
		if time.Now().After(deadline) {
			f.t.Fatalf("queue of %q: %d entries, want %d", name, len(f.queued(ctx, name)), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// noQueueKeys fails if any queue key of name is left.
func (f *queueFixture) noQueueKeys(ctx context.Context, name string) {
	f.t.Helper()
	n, err := f.rdb.Exists(ctx, f.key(name, ":q"), f.key(name, ":w")).Result()
	if err != nil || n != 0 {
		f.t.Errorf("queue keys of %q left behind: %d (%v)", name, n, err)
	}
}

// hold has s take name for owner with TryAcquire, failing the test if it
// cannot.
func (f *queueFixture) hold(ctx context.Context, s *redis.Store, name, owner string, ttl time.Duration) leasehold.Record {
	f.t.Helper()
	rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: name, Owner: owner, TTL: ttl})
	if err != nil {
		f.t.Fatal(err)
	}
	return rec
}

type waitResult struct {
	rec leasehold.Record
	err error
}

func acquireWait(ctx context.Context, s *redis.Store, req leasehold.AcquireRequest) <-chan waitResult {
	ch := make(chan waitResult, 1)
	go func() {
		rec, err := s.AcquireWait(ctx, req)
		ch <- waitResult{rec, err}
	}()
	return ch
}

// TestQueueFIFO: 8 waiters, each on a store of its own, queue one after
// another (each seen in the queue before the next starts). Each release
// hands the lease to the next in arrival order, with a greater token, and
// each waiter is woken exactly once: one wait.lua run (its enqueue) and
// one message addressed to it, none to the others. (Each grant's TTL is
// past the next waiter's liveness deadline, so that waiter refreshes its
// entry before the grant could expire and is not told it is the head.)
func TestQueueFIFO(t *testing.T) {
	f := newQueueFixture(t)
	ctx := ctxT(t, 2*time.Minute)
	const name, n = "fifo", 8
	holder := f.open()
	rec := f.hold(ctx, holder, name, "holder", time.Minute)
	stores := make([]*redis.Store, n)
	results := make([]<-chan waitResult, n)
	for i := range n {
		stores[i] = f.open(redis.WithLiveness(time.Minute)) // no refresh polls during the test
		results[i] = acquireWait(ctx, stores[i], leasehold.AcquireRequest{
			Name: name, Owner: fmt.Sprintf("w%d", i), TTL: time.Minute, Data: []byte{byte(i)},
		})
		f.waitQueued(ctx, name, i+1)
	}
	prev := rec
	for i := range n {
		if err := stores[0].Release(ctx, name, prev.Owner, prev.Token); err != nil && i > 0 {
			t.Fatalf("release %d: %v", i, err)
		} else if i == 0 && err != nil {
			t.Fatalf("holder release: %v", err)
		}
		var got waitResult
		select {
		case got = <-results[i]:
		case <-time.After(20 * time.Second):
			t.Fatalf("waiter %d not granted within 20s of the release", i)
		}
		if got.err != nil {
			t.Fatalf("waiter %d: %v", i, got.err)
		}
		if got.rec.Owner != fmt.Sprintf("w%d", i) || got.rec.Token <= prev.Token || string(got.rec.Data) != string([]byte{byte(i)}) {
			t.Fatalf("grant %d = %+v after token %d", i, got.rec, prev.Token)
		}
		cur, err := holder.Get(ctx, name)
		if err != nil || cur.Owner != got.rec.Owner || cur.Token != got.rec.Token {
			t.Fatalf("Get after grant %d = %+v, %v", i, cur, err)
		}
		// No one behind it has been granted or woken.
		for j := i + 1; j < n; j++ {
			select {
			case r := <-results[j]:
				t.Fatalf("waiter %d returned before its turn (%d): %+v", j, i, r)
			default:
			}
			if runs, msgs := stores[j].QueueStats(); runs != 1 || msgs != 0 {
				t.Fatalf("waiter %d after grant %d: %d wait runs, %d messages; want 1 and 0", j, i, runs, msgs)
			}
		}
		if len(f.queued(ctx, name)) != n-1-i {
			t.Fatalf("queue after grant %d: %v", i, f.queued(ctx, name))
		}
		prev = got.rec
	}
	for i, s := range stores {
		if runs, msgs := s.QueueStats(); runs != 1 || msgs != 1 {
			t.Errorf("waiter %d: %d wait runs, %d messages; want exactly 1 and 1", i, runs, msgs)
		}
	}
	if err := holder.Release(ctx, name, prev.Owner, prev.Token); err != nil {
		t.Fatal(err)
	}
	f.noQueueKeys(ctx, name)
}

// TestQueueClientFIFO: Client.Acquire on the store waits in the queue;
// several clients on separate stores get the lease in arrival order.
func TestQueueClientFIFO(t *testing.T) {
	f := newQueueFixture(t)
	ctx := ctxT(t, 2*time.Minute)
	const name, n = "client-fifo", 4
	holder, _ := leasehold.New(f.open(), leasehold.WithOwner("holder"))
	l, err := holder.Acquire(ctx, name, leasehold.TTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	for i := range n {
		c, _ := leasehold.New(f.open(), leasehold.WithOwner(fmt.Sprintf("c%d", i)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Acquire(ctx, name, leasehold.TTL(time.Minute))
			if err != nil {
				t.Errorf("c%d: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, c.Owner())
			mu.Unlock()
			if err := l.Release(ctx); err != nil {
				t.Errorf("c%d release: %v", i, err)
			}
		}()
		f.waitQueued(ctx, name, i+1)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if got := strings.Join(order, " "); got != "c0 c1 c2 c3" {
		t.Errorf("grant order %q, want arrival order c0 c1 c2 c3", got)
	}
	f.noQueueKeys(ctx, name)
}

// TestQueueVanishedWaiter: a waiter whose process died (its store closed
// without leaving the queue) holds up the waiter behind it for no longer
// than its liveness window: once that passed, the release grants the next
// live waiter and drops the dead entry.
func TestQueueVanishedWaiter(t *testing.T) {
	f := newQueueFixture(t)
	ctx := ctxT(t, 2*time.Minute)
	const name = "vanished"
	const liveness = time.Second
	holder := f.open()
	rec := f.hold(ctx, holder, name, "holder", time.Minute)
	dead := f.open(redis.WithLiveness(liveness))
	deadRes := acquireWait(ctx, dead, leasehold.AcquireRequest{Name: name, Owner: "dead", TTL: time.Minute})
	f.waitQueued(ctx, name, 1)
	ids := f.queued(ctx, name)
	dead.Close() // a crash: no chance to leave
	if r := <-deadRes; !errors.Is(r.err, leasehold.ErrClosed) {
		t.Fatalf("AcquireWait of a closed store = %+v, want ErrClosed", r)
	}
	if got := f.queued(ctx, name); len(got) != 1 || got[0] != ids[0] {
		t.Fatalf("the dead waiter's entry is gone at once (%v): the test needs it left behind", got)
	}
	live := f.open(redis.WithLiveness(time.Minute))
	liveRes := acquireWait(ctx, live, leasehold.AcquireRequest{Name: name, Owner: "live", TTL: time.Minute})
	f.waitQueued(ctx, name, 2)
	time.Sleep(liveness + 200*time.Millisecond) // the dead entry is past its deadline
	t0 := time.Now()
	if err := holder.Release(ctx, name, "holder", rec.Token); err != nil {
		t.Fatal(err)
	}
	r, at := grantedBy(t, liveRes, "live", 20*time.Second)
	t.Logf("granted %s after the release", at.Sub(t0))
	f.releaseLast(ctx, live, name, "live", r.Token)
}

// TestQueueHolderExpires: the head of the queue takes the lease when the
// holder's grant expires (nobody releases it), by its own timer.
func TestQueueHolderExpires(t *testing.T) {
	f := newQueueFixture(t)
	ctx := ctxT(t, time.Minute)
	const name = "expires"
	holder := f.open()
	f.hold(ctx, holder, name, "holder", 300*time.Millisecond)
	w := f.open(redis.WithLiveness(time.Minute))
	res := acquireWait(ctx, w, leasehold.AcquireRequest{Name: name, Owner: "w", TTL: time.Minute})
	grantedBy(t, res, "w", 15*time.Second) // its refresh interval is 20s
}

// TestQueueNoOvertake: while a live waiter is queued, TryAcquire by anyone
// else never takes the lease, even when it finds the lease free (the
// holder expired and nothing handed it over yet): it hands the lease to
// the head and reports the head as the holder.
func TestQueueNoOvertake(t *testing.T) {
	f := newQueueFixture(t)
	ctx := ctxT(t, time.Minute)
	const name = "overtake"
	holder := f.open()
	rec := f.hold(ctx, holder, name, "holder", time.Minute)
	w := f.open(redis.WithLiveness(time.Minute))
	res := acquireWait(ctx, w, leasehold.AcquireRequest{Name: name, Owner: "head", TTL: time.Minute})
	f.waitQueued(ctx, name, 1)
	other := f.open()
	req := leasehold.AcquireRequest{Name: name, Owner: "other", RequestID: "r1", TTL: time.Minute}
	var he *leasehold.HeldError
	if _, err := other.TryAcquire(ctx, req); !errors.As(err, &he) || he.Owner != "holder" {
		t.Fatalf("TryAcquire while held = %v", err)
	}
	// The holder's grant vanishes as an expiry would, unnoticed by the
	// waiter (its timer is a minute away).
	if err := f.rdb.Del(ctx, f.key(name, "")).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := other.TryAcquire(ctx, req)
	if !errors.As(err, &he) || he.Owner != "head" || he.Token <= rec.Token {
		t.Fatalf("TryAcquire of a free lease with a live waiter queued = %v, want a HeldError of the head", err)
	}
	head, _ := grantedBy(t, res, "head", 20*time.Second)
	if head.Token != he.Token {
		t.Fatalf("head: %+v, HeldError %+v", head, he)
	}
	if err := w.Release(ctx, name, "head", head.Token); err != nil {
		t.Fatal(err)
	}
	// Nobody waits now: the same request gets the lease.
	if _, err := other.TryAcquire(ctx, req); err != nil {
		t.Fatalf("TryAcquire with the queue empty: %v", err)
	}
	f.noQueueKeys(ctx, name)
}

// TestQueueCancelLeaves: a waiter whose context ends leaves no entry, and
// the waiter behind it is next; a grant made to a request that is leaving
// is released by its leave step.
func TestQueueCancelLeaves(t *testing.T) {
	f := newQueueFixture(t)
	ctx := ctxT(t, time.Minute)
	const name = "cancel"
	holder := f.open()
	rec := f.hold(ctx, holder, name, "holder", time.Minute)
	s := f.open(redis.WithLiveness(time.Minute))
	wctx, cancel := context.WithCancel(ctx)
	res := acquireWait(wctx, s, leasehold.AcquireRequest{Name: name, Owner: "quitter", TTL: time.Minute})
	f.waitQueued(ctx, name, 1)
	cancel()
	if r := <-res; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled AcquireWait = %+v", r)
	}
	f.noQueueKeys(ctx, name)

	// A second waiter, cancelled, then the release: the lease stays free.
	wctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := s.AcquireWait(wctx, leasehold.AcquireRequest{Name: name, Owner: "timeout", TTL: time.Minute}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AcquireWait past its deadline = %v", err)
	}
	f.noQueueKeys(ctx, name)
	if err := holder.Release(ctx, name, "holder", rec.Token); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Get(ctx, name); !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("after the release with no one queued: %v, want free", err)
	}

	// The leave step of a request that was granted meanwhile (the grant
	// raced with the end of its context) releases that grant.
	req := leasehold.AcquireRequest{Name: name, Owner: "raced", RequestID: "req-1", TTL: time.Minute}
	if _, err := s.TryAcquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	done, cancel2 := context.WithCancel(ctx)
	cancel2()
	if err := s.Leave(done, req, "gone"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Leave = %v", err)
	}
	if _, err := holder.Get(ctx, name); !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("a grant to a leaving request is still held: %v", err)
	}
}

// nextMessage returns the next message on msgs, the channel of a
// subscription, failing the test if none comes within 30 s: a message lost
// (not published, or published while go-redis reconnected the
// subscription) otherwise held the test for ever.
func nextMessage(t *testing.T, msgs <-chan *goredis.Message, what string) *goredis.Message {
	t.Helper()
	select {
	case m := <-msgs:
		return m
	case <-time.After(30 * time.Second):
		t.Fatalf("no message within 30s; waited for %s", what)
		return nil
	}
}

// TestNoPublishUncontended: a release publishes nothing when no one waits
// (no queued waiter, no Watch); with a Watch it publishes the name; with a
// queued waiter it sends that waiter alone its grant.
func TestNoPublishUncontended(t *testing.T) {
	f := newQueueFixture(t)
	ctx := ctxT(t, time.Minute)
	ps := f.rdb.Subscribe(ctx, f.prefix+"released")
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	msgs := ps.Channel()
	s := f.open()
	pair := func(name string) {
		rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: name, Owner: "a", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, name, "a", rec.Token); err != nil {
			t.Fatal(err)
		}
	}
	for range 20 {
		pair("quiet")
	}
	// A message published on the channel arrives before the reply to a
	// later PUBLISH of ours on it.
	if err := f.rdb.Publish(ctx, f.prefix+"released", "fence-post").Err(); err != nil {
		t.Fatal(err)
	}
	if m := nextMessage(t, msgs, "the fence post"); m.Payload != "fence-post" {
		t.Fatalf("an uncontended release published %q", m.Payload)
	}

	// A Watch registers interest: its releases are published.
	wctx, stop := context.WithCancel(ctx)
	ch, err := s.Watch(wctx, "watched")
	if err != nil {
		t.Fatal(err)
	}
	pair("watched")
	if m := nextMessage(t, msgs, "the watched name's release"); m.Payload != "watched" {
		t.Fatalf("release of a watched name published %q, want the name", m.Payload)
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("Watch not woken by the release")
	}
	stop()
	// The marker outlives the Watch by at most its expiry; gone, releases
	// are quiet again.
	if err := f.rdb.Del(ctx, f.key("watched", ":i")).Err(); err != nil {
		t.Fatal(err)
	}

	// A queued waiter: the release sends it alone its grant.
	rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "queued", Owner: "a", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	w := f.open(redis.WithLiveness(time.Minute))
	res := acquireWait(ctx, w, leasehold.AcquireRequest{Name: "queued", Owner: "b", TTL: time.Minute})
	f.waitQueued(ctx, "queued", 1)
	id := f.queued(ctx, "queued")[0]
	if err := s.Release(ctx, "queued", "a", rec.Token); err != nil {
		t.Fatal(err)
	}
	m := nextMessage(t, msgs, "the grant to the queued waiter")
	if !strings.HasPrefix(m.Payload, "queued\x00"+id+"\x00") {
		t.Fatalf("release to a queued waiter published %q, want a grant addressed to %s", m.Payload, id)
	}
	if r := <-res; r.err != nil || r.rec.Owner != "b" {
		t.Fatalf("waiter: %+v", r)
	}
	pair("watched")
	if err := f.rdb.Publish(ctx, f.prefix+"released", "fence-post").Err(); err != nil {
		t.Fatal(err)
	}
	if m := nextMessage(t, msgs, "the last fence post"); m.Payload != "fence-post" {
		t.Fatalf("a release after the Watch ended published %q", m.Payload)
	}
}

// TestAcquireWaitBadInput: AcquireWait refuses what TryAcquire refuses,
// before anything is queued; WithLiveness refuses values out of range.
func TestAcquireWaitBadInput(t *testing.T) {
	f := newQueueFixture(t)
	ctx := ctxT(t, time.Minute)
	s := f.open()
	for _, req := range []leasehold.AcquireRequest{
		{Name: "", Owner: "a", TTL: time.Second},
		{Name: "bad", Owner: "", TTL: time.Second},
		{Name: "bad", Owner: "a", TTL: 0},
		{Name: "bad\x00x", Owner: "a", TTL: time.Second},
		{Name: "bad", Owner: "a", TTL: time.Second, RequestID: "x\ny"},
	} {
		if _, err := s.AcquireWait(ctx, req); !errors.Is(err, leasehold.ErrInvalid) {
			t.Errorf("AcquireWait(%+v) = %v, want ErrInvalid", req, err)
		}
	}
	f.noQueueKeys(ctx, "bad")
	for _, d := range []time.Duration{0, time.Millisecond, 11 * time.Minute} {
		if _, err := redis.Open(ctx, f.url, redis.WithLiveness(d)); !errors.Is(err, leasehold.ErrInvalid) {
			t.Errorf("WithLiveness(%s) = %v, want ErrInvalid", d, err)
		}
	}
	if _, err := redis.Open(ctx, f.url+"?liveness=soon"); !errors.Is(err, leasehold.ErrInvalid) {
		t.Errorf("liveness=soon: %v, want ErrInvalid", err)
	}
	s2, err := redis.Open(ctx, f.url+"?liveness=2s&holdback=0s")
	if err != nil || s2.Liveness() != 2*time.Second {
		t.Fatalf("liveness=2s: %v", err)
	}
	s2.Close()
}

// TestQueueHeadLeaves: when the head leaves, the waiter behind it learns
// that it is the head at once, and so takes the lease when the holder
// expires rather than at its next refresh (a third of its liveness
// window, here 20s).
func TestQueueHeadLeaves(t *testing.T) {
	f := newQueueFixture(t)
	ctx := ctxT(t, time.Minute)
	const name = "head-leaves"
	holder := f.open()
	f.hold(ctx, holder, name, "holder", 2*time.Second)
	first, second := f.open(redis.WithLiveness(time.Minute)), f.open(redis.WithLiveness(time.Minute))
	fctx, cancel := context.WithCancel(ctx)
	firstRes := acquireWait(fctx, first, leasehold.AcquireRequest{Name: name, Owner: "first", TTL: time.Minute})
	f.waitQueued(ctx, name, 1)
	secondRes := acquireWait(ctx, second, leasehold.AcquireRequest{Name: name, Owner: "second", TTL: time.Minute})
	f.waitQueued(ctx, name, 2)
	cancel()
	if r := <-firstRes; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled head: %+v", r)
	}
	grantedBy(t, secondRes, "second", 12*time.Second)
	f.noQueueKeys(ctx, name)
}
