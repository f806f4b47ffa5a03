package redis_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/redis"
)

// TestAcquireWaitResumes: a request retried after its wait failed (here
// its store closed under it) resumes its entry, from any process, and
// keeps its place ahead of a waiter that came later.
func TestAcquireWaitResumes(t *testing.T) {
	f := newQueueFixture(t)
	ctx := ctxT(t, time.Minute)
	const name = "resumes"
	holder := f.open()
	x := f.hold(ctx, holder, name, "x", time.Minute)
	req := leasehold.AcquireRequest{Name: name, Owner: "a", RequestID: "req-a", TTL: time.Minute}
	first := f.open(redis.WithLiveness(time.Minute))
	firstRes := acquireWait(ctx, first, req)
	f.waitQueued(ctx, name, 1)
	b := f.open(redis.WithLiveness(time.Minute))
	bRes := acquireWait(ctx, b, leasehold.AcquireRequest{Name: name, Owner: "b", TTL: time.Minute})
	f.waitQueued(ctx, name, 2)
	before := f.queued(ctx, name)
	first.Close()
	if r := <-firstRes; !errors.Is(r.err, leasehold.ErrClosed) {
		t.Fatalf("AcquireWait of a closed store = %+v", r)
	}
	retry := f.open(redis.WithLiveness(time.Minute))
	retryRes := acquireWait(ctx, retry, req)
	deadline := time.Now().Add(10 * time.Second)
	for runs, _ := retry.QueueStats(); runs == 0; runs, _ = retry.QueueStats() {
		if time.Now().After(deadline) {
			t.Fatal("the retry did not step")
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // its step has run
	if got := f.queued(ctx, name); len(got) != 2 || got[0] != before[0] || got[1] != before[1] {
		t.Fatalf("queue after the retry = %v, want the same entries %v", got, before)
	}
	if err := holder.Release(ctx, name, "x", x.Token); err != nil {
		t.Fatal(err)
	}
	a, _ := grantedBy(t, retryRes, "a", 10*time.Second)
	select {
	case r := <-bRes:
		t.Fatalf("b granted before a released: %+v", r)
	default:
	}
	if err := retry.Release(ctx, name, "a", a.Token); err != nil {
		t.Fatal(err)
	}
	bRec, _ := grantedBy(t, bRes, "b", 10*time.Second)
	f.releaseLast(ctx, b, name, "b", bRec.Token)
}

// TestAcquireWaitGivesUp: AcquireWait with a context that has already
// ended removes the entry an earlier call of the same request left in the
// queue, or releases the grant that was handed to that entry since, and
// returns the context's error.
func TestAcquireWaitGivesUp(t *testing.T) {
	f := newQueueFixture(t)
	ctx := ctxT(t, time.Minute)
	const name = "gives-up"
	holder := f.open()
	other := f.open()
	done, cancel := context.WithCancel(ctx)
	cancel()
	// leftBehind queues req on a store that then closes (its wait fails
	// with the entry left in the queue).
	leftBehind := func(req leasehold.AcquireRequest) {
		t.Helper()
		s := f.open(redis.WithLiveness(time.Minute))
		res := acquireWait(ctx, s, req)
		f.waitQueued(ctx, name, 1)
		s.Close()
		if r := <-res; !errors.Is(r.err, leasehold.ErrClosed) {
			t.Fatalf("AcquireWait of a closed store = %+v", r)
		}
		if got := f.queued(ctx, name); len(got) != 1 {
			t.Fatalf("queue after the failed wait: %v, want its entry left", got)
		}
	}
	x := f.hold(ctx, holder, name, "x", time.Minute)

	// The entry is removed.
	req := leasehold.AcquireRequest{Name: name, Owner: "a", RequestID: "req-1", TTL: time.Minute}
	leftBehind(req)
	if _, err := other.AcquireWait(done, req); !errors.Is(err, context.Canceled) {
		t.Fatalf("AcquireWait(ended ctx) = %v, want context.Canceled", err)
	}
	f.noQueueKeys(ctx, name)
	if err := holder.Release(ctx, name, "x", x.Token); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Get(ctx, name); !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("after the release: %v, want free (nobody queued)", err)
	}

	// The grant handed to the entry meanwhile is released.
	x = f.hold(ctx, holder, name, "x", time.Minute)
	req.RequestID = "req-2"
	leftBehind(req)
	if err := holder.Release(ctx, name, "x", x.Token); err != nil {
		t.Fatal(err)
	}
	if cur, err := holder.Get(ctx, name); err != nil || cur.Owner != "a" {
		t.Fatalf("after the release: %+v, %v; want the grant handed to the abandoned entry", cur, err)
	}
	if _, err := other.AcquireWait(done, req); !errors.Is(err, context.Canceled) {
		t.Fatalf("AcquireWait(ended ctx) = %v, want context.Canceled", err)
	}
	if cur, err := holder.Get(ctx, name); !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("after giving up: %+v, %v; want the abandoned grant released", cur, err)
	}
	// Bad input is refused first, even with an ended context.
	if _, err := other.AcquireWait(done, leasehold.AcquireRequest{Name: name, Owner: "", RequestID: "r", TTL: time.Minute}); !errors.Is(err, leasehold.ErrInvalid) {
		t.Fatalf("AcquireWait(ended ctx, no owner) = %v, want ErrInvalid", err)
	}
	f.noQueueKeys(ctx, name)
}

// breakableConn fails every read and write while its dialer is broken.
type breakableConn struct {
	net.Conn
	broken *atomic.Bool
}

func (c breakableConn) Read(p []byte) (int, error) {
	if c.broken.Load() {
		return 0, errors.New("test: connection broken")
	}
	return c.Conn.Read(p)
}

func (c breakableConn) Write(p []byte) (int, error) {
	if c.broken.Load() {
		return 0, errors.New("test: connection broken")
	}
	return c.Conn.Write(p)
}

// TestClientGivesUpAfterWaitError: a Client whose queued wait fails with
// a transient error (its connections break) and that then gives up (its
// OnError cancels) leaves nothing behind: no entry in the queue, and so no
// grant to nobody when the holder releases.
func TestClientGivesUpAfterWaitError(t *testing.T) {
	f := newQueueFixture(t)
	ctx := ctxT(t, time.Minute)
	const name = "client-gives-up"
	holder := f.open()
	x := f.hold(ctx, holder, name, "x", time.Minute)
	opt, err := goredis.ParseURL(f.url)
	if err != nil {
		t.Fatal(err)
	}
	var broken atomic.Bool
	opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if broken.Load() {
			return nil, errors.New("test: dial refused")
		}
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return breakableConn{c, &broken}, nil
	}
	opt.MaxRetries = 1
	rdb := goredis.NewClient(opt)
	defer rdb.Close()
	// Liveness 1.5s: the waiter steps every 0.5s, so its next step meets
	// the broken connections soon.
	s, err := redis.New(rdb, redis.WithKeyPrefix(f.prefix), redis.WithHoldback(0), redis.WithLiveness(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := leasehold.New(s, leasehold.WithOwner("quitter"))
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	var errs atomic.Int64
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(actx, name, leasehold.TTL(time.Minute), leasehold.OnError(func(error) {
			errs.Add(1)
			broken.Store(false) // the fault passes, but the caller gives up
			cancel()
		}))
		done <- err
	}()
	f.waitQueued(ctx, name, 1)
	broken.Store(true)
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || errs.Load() == 0 {
			t.Fatalf("Acquire = %v after %d errors, want context.Canceled after an error", err, errs.Load())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Acquire did not give up")
	}
	if got := f.queued(ctx, name); len(got) != 0 {
		t.Fatalf("queue after the caller gave up: %v, want empty", got)
	}
	if err := holder.Release(ctx, name, "x", x.Token); err != nil {
		t.Fatal(err)
	}
	if cur, err := holder.Get(ctx, name); !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("after the release: %+v, %v; want free, not granted to the caller that gave up", cur, err)
	}
	f.noQueueKeys(ctx, name)
}
