package redis_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/redis"
)

// TestAcquireWaitLateRepliesReturnOnTime: a waiter whose Redis replies
// come late returns when its context ends, not when the reply of the wait
// step in flight arrives (R17's late row: a Client.Acquire with a 3 s
// timeout returned after 7.5 s). The step's outcome is still settled: the
// entry it made is left once its reply comes, so the lease is not handed
// to the waiter that gave up.
func TestAcquireWaitLateRepliesReturnOnTime(t *testing.T) {
	f := newQueueFixture(t)
	ctx := ctxT(t, time.Minute)
	const name = "late-replies"
	holder := f.open()
	x := f.hold(ctx, holder, name, "x", time.Minute)

	const delay = 3 * time.Second
	waiter, px := lateWaiter(t, f, delay)
	// Connected and subscribed, on time: a wait on a free name.
	warm, err := waiter.AcquireWait(ctx, leasehold.AcquireRequest{Name: name + "/warm", Owner: "w", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := waiter.Release(ctx, warm.Name, "w", warm.Token); err != nil {
		t.Fatal(err)
	}
	px.late.Store(true)
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	start := time.Now()
	_, err = waiter.AcquireWait(cctx, leasehold.AcquireRequest{Name: name, Owner: "w", RequestID: "w1", TTL: time.Minute})
	took := time.Since(start)
	cancel()
	px.late.Store(false)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AcquireWait = %v, want context.DeadlineExceeded", err)
	}
	// No reply can come before delay: returning before it means the call
	// did not wait for the step in flight.
	if took >= delay {
		t.Errorf("AcquireWait with a 500ms deadline returned after %s, once its late reply (%s) had come", took.Round(time.Millisecond), delay)
	}
	// Once the step's reply has come, its entry is left.
	deadline := time.Now().Add(30 * time.Second)
	for len(f.queued(ctx, name)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the waiter that gave up is still queued: %v", f.queued(ctx, name))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := holder.Release(ctx, name, "x", x.Token); err != nil {
		t.Fatal(err)
	}
	if r, err := holder.Get(ctx, name); err == nil && r.Owner == "w" {
		t.Fatalf("the lease was handed to the waiter that gave up: %+v", r)
	}
}

// lateWaiter opens a store of f's prefix through a lateProxy of delay.
func lateWaiter(t *testing.T, f *queueFixture, delay time.Duration) (*redis.Store, *lateProxy) {
	t.Helper()
	u, err := url.Parse(f.url)
	if err != nil {
		t.Fatal(err)
	}
	px := newLateProxy(t, u.Host, delay)
	u.Host = px.addr
	waiter := open(t, u.String(), redis.WithKeyPrefix(f.prefix), redis.WithHoldback(0))
	t.Cleanup(func() { waiter.Close() })
	return waiter, px
}

// lateProxy forwards TCP connections to target; while late is set, every
// chunk of a reply is delivered delay late. With drop set, the next chunk
// of a reply is not delivered and the client's connection is closed: a
// reply lost after Redis ran the command.
type lateProxy struct {
	addr string
	late atomic.Bool
	drop atomic.Bool
}

func newLateProxy(t *testing.T, target string, delay time.Duration) *lateProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &lateProxy{addr: ln.Addr().String()}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			t.Cleanup(func() { c.Close(); up.Close() })
			go func() { io.Copy(up, c); up.Close() }()
			go func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := up.Read(buf)
					if n > 0 {
						if p.drop.CompareAndSwap(true, false) {
							c.Close()
							up.Close()
							return
						}
						if p.late.Load() {
							time.Sleep(delay)
						}
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						c.Close()
						return
					}
				}
			}()
		}
	}()
	return p
}

// TestAcquireWaitLateRepliesFirstWait: as above, but the store's first
// wait comes while the replies are late, so its subscription starts then.
// Starting it (a connection of its own, whose handshake's reply is late)
// held the caller, and every other waiter of the store, until the reply
// came: R17's client(redis) late row, whose waiter first waits as the
// fault begins, saw a Client.Acquire with a 3 s timeout return after
// 7.5 s (CI runs 38 and 56, on a loaded machine).
func TestAcquireWaitLateRepliesFirstWait(t *testing.T) {
	f := newQueueFixture(t)
	ctx := ctxT(t, time.Minute)
	const name = "late-first-wait"
	holder := f.open()
	f.hold(ctx, holder, name, "x", time.Minute)

	const delay = 3 * time.Second
	waiter, px := lateWaiter(t, f, delay)
	// Connected, on time, but not subscribed: no wait yet.
	if _, err := waiter.Get(ctx, name); err != nil {
		t.Fatal(err)
	}
	px.late.Store(true)
	defer px.late.Store(false)
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := waiter.AcquireWait(cctx, leasehold.AcquireRequest{Name: name, Owner: "w", RequestID: "w1", TTL: time.Minute})
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AcquireWait = %v, want context.DeadlineExceeded", err)
	}
	if took >= delay {
		t.Errorf("the store's first AcquireWait, with a 500ms deadline, returned after %s: it waited for its subscription's late reply (%s)", took.Round(time.Millisecond), delay)
	}
}

// TestTryAcquireReplyLost: go-redis sends a command again when the
// connection breaks before its reply (MaxRetries, 3 by default). An
// acquire that Redis ran but whose reply was lost is resent; the resend
// finds the caller's own grant. It must get that grant back (its token),
// not be told the caller holds the lease — also when the caller gave no
// request id. A second acquire by the same owner is still refused.
func TestTryAcquireReplyLost(t *testing.T) {
	f := newQueueFixture(t)
	s, px := lateWaiter(t, f, 0)
	direct := open(t, f.url, redis.WithKeyPrefix(f.prefix), redis.WithHoldback(0))
	defer direct.Close()
	ctx := ctxT(t, 30*time.Second)
	for i, rq := range []leasehold.AcquireRequest{
		{Name: "no-request-id", Owner: "a", TTL: time.Minute},
		{Name: "with-request-id", Owner: "a", RequestID: "r1", TTL: time.Minute},
	} {
		// An acquire before, so that the store has read what it checks
		// first (the restart marker) and the drop hits the acquire's reply.
		if _, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: rq.Name + "-before", Owner: "a", TTL: time.Minute}); err != nil {
			t.Fatalf("case %d: acquire before: %v", i, err)
		}
		px.drop.Store(true)
		rec, err := s.TryAcquire(ctx, rq)
		if err != nil || rec.Owner != "a" {
			t.Fatalf("case %d: acquire whose first reply was lost: %+v, %v; want a's grant", i, rec, err)
		}
		if px.drop.Load() {
			t.Fatalf("case %d: no reply was dropped", i)
		}
		got, err := direct.Get(ctx, rq.Name)
		if err != nil || got.Owner != "a" || got.Token != rec.Token {
			t.Fatalf("case %d: after the lost reply: %+v, %v; want a's grant, token %d", i, got, err, rec.Token)
		}
		var held *leasehold.HeldError
		if _, err := direct.TryAcquire(ctx, leasehold.AcquireRequest{Name: rq.Name, Owner: "a", TTL: time.Minute}); !errors.As(err, &held) || held.Token != rec.Token {
			t.Fatalf("case %d: a second acquire by a without the request id: %v; want held, token %d", i, err, rec.Token)
		}
	}
}
