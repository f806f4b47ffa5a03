package postgres_test

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
	"github.com/leasehold/leasehold/postgres"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// TestCutAcquireSettled: an acquire whose context ends before its
// statement has reached the server must not grant the lease after the call
// has returned (issue 28, scenario 1: a grant that landed 2 ms after the
// give-up held a workflow instance for the lease's TTL). The statement is
// held up on its way (a proxy delays the connection's bytes by 1 s), so
// pgx's cancel request, which takes another connection, finds the backend
// idle and does nothing, and the statement runs after the call returned.
// Before, its grant then held the lease (10 s); now the call ends the
// statement's backend before its clean-up is done.
func TestCutAcquireSettled(t *testing.T) {
	base := enginetest.PostgresURL(t)
	table := freshTable(t, base, "lh_test_cut_")
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	// The call gives up after 150 ms and its statement arrives after 1 s
	// (with 50 ms and 300 ms, a loaded machine could end the call before
	// it had sent the statement: no backend to end).
	px := newSlowProxy(t, u.Host, time.Second)
	u.Host = px.addr()
	s := open(t, withParam(u.String(), "table", table))
	defer s.Close()
	ctx := ctxFor(t, time.Minute)
	const name = "wf/x/lock/i"
	rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: name, Owner: "other", RequestID: "o1", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, name, "other", rec.Token); err != nil {
		t.Fatal(err)
	}
	px.hold.Store(true) // the next connection to send holds its bytes up
	cctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	_, err = s.TryAcquire(cctx, leasehold.AcquireRequest{Name: name, Owner: "cut", RequestID: "c1", TTL: 10 * time.Second})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cut TryAcquire = %v, want context.DeadlineExceeded", err)
	}
	// Whatever the order of the clean-up and the statement, the lease ends
	// up free, and stays free past the statement's arrival.
	free := func() bool {
		r, err := s.Get(ctx, name)
		return errors.Is(err, leasehold.ErrNotFound) || err == nil && r.Owner != "cut"
	}
	for deadline := time.Now().Add(5 * time.Second); !free() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // past the statement's arrival
	if !free() {
		r, err := s.Get(ctx, name)
		t.Fatalf("the cut acquire's grant holds the lease: %+v, %v", r, err)
	}
	if n := postgres.Fences(s); n != 1 {
		t.Errorf("%d backends ended, want 1", n)
	}
}

// slowProxy forwards TCP connections to target; once hold is set, the
// first connection accepted before that to send anything has every chunk
// it sends delayed by delay.
type slowProxy struct {
	ln     net.Listener
	target string
	delay  time.Duration
	hold   atomic.Bool
	victim atomic.Pointer[net.Conn]
}

func newSlowProxy(t *testing.T, target string, delay time.Duration) *slowProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &slowProxy{ln: ln, target: target, delay: delay}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c, p.hold.Load())
		}
	}()
	return p
}

func (p *slowProxy) addr() string { return p.ln.Addr().String() }

func (p *slowProxy) serve(c net.Conn, late bool) {
	defer c.Close()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer s.Close()
	go func() {
		_, _ = io.Copy(c, s)
		c.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if !late && p.hold.Load() && (p.victim.CompareAndSwap(nil, &c) || p.victim.Load() == &c) {
				time.Sleep(p.delay)
			}
			if _, werr := s.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if tc, ok := s.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
			time.Sleep(2 * time.Second) // let the server answer what it got
			return
		}
	}
}
