package resp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/testrig/servertest"
)

// testServer answers, one command at a time per connection: ECHO x → x;
// SLEEP ms x → x after ms; DROP → closes the connection; AUTH → +OK.
type testServer struct {
	ln    net.Listener
	quit  chan struct{}
	conns atomic.Int32 // accepted so far
	mu    sync.Mutex
	open  []net.Conn
	wg    sync.WaitGroup
}

func startTestServer(t *testing.T) *testServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{ln: ln, quit: make(chan struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			s.mu.Lock()
			s.open = append(s.open, nc)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() { defer s.wg.Done(); s.serve(nc) }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		close(s.quit)
		s.dropAll()
		s.wg.Wait()
	})
	return s
}

func (s *testServer) dropAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.open {
		c.Close()
	}
	s.open = nil
}

func (s *testServer) serve(nc net.Conn) {
	defer nc.Close()
	rd := NewReader(bufio.NewReader(nc))
	bw := bufio.NewWriter(nc)
	for {
		args, err := rd.ReadCommand()
		if err != nil {
			return
		}
		var out []byte
		switch string(args[0]) {
		case "ECHO":
			out = AppendBulk(out, args[1])
		case "SLEEP":
			ms, _ := ParseInt(args[1])
			bw.Flush()
			select {
			case <-time.After(time.Duration(ms) * time.Millisecond):
			case <-s.quit:
				return
			}
			out = AppendBulk(out, args[2])
		case "DROP":
			return
		case "AUTH":
			out = AppendSimple(out, "OK")
		default:
			out = AppendError(out, "ERR unknown")
		}
		bw.Write(out)
		if rd.Buffered() == 0 {
			if bw.Flush() != nil {
				return
			}
		}
	}
}

// dial connects to s.
func (s *testServer) dial(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", s.ln.Addr().String())
}

// testClient starts a testServer and a client of it with conns
// connections, closed when the test ends.
func testClient(t *testing.T, conns int) (*testServer, *Client) {
	s := startTestServer(t)
	c := s.client(conns)
	t.Cleanup(func() { c.Close() })
	return s, c
}

// wantConns checks that s has accepted n connections so far.
func (s *testServer) wantConns(t *testing.T, n int32, when string) {
	t.Helper()
	if got := s.conns.Load(); got != n {
		t.Errorf("%d connections%s, want %d", got, when, n)
	}
}

func (s *testServer) client(conns int) *Client {
	return NewClient(ClientOptions{
		Dial: s.dial,
		Init: func(c *Conn) error {
			return c.Do(func(b []byte) []byte { return AppendCommand(b, "AUTH", "x") }, func(v Value) error {
				if v.Type != SimpleString {
					return errors.New("AUTH refused")
				}
				return nil
			})
		},
		Conns: conns,
	})
}

func echo(ctx context.Context, c *Client, cmd ...string) (string, error) {
	var got string
	err := c.Do(ctx, func(b []byte) []byte { return AppendCommand(b, cmd...) }, func(v Value) error {
		if v.Type != BulkString {
			return fmt.Errorf("reply %s", show(v))
		}
		got = string(v.Str)
		return nil
	})
	return got, err
}

// TestPipelining: many goroutines share two connections; every caller gets
// the reply to its own request.
func TestPipelining(t *testing.T) {
	s, c := testClient(t, 2)
	ctx := context.Background()
	const workers, each = 32, 200
	servertest.Parallel(t, workers, func(w int) error {
		for i := 0; i < each; i++ {
			want := fmt.Sprintf("w%d-%d", w, i)
			got, err := echo(ctx, c, "ECHO", want)
			if err == nil && got != want {
				err = fmt.Errorf("sent %q, got %q", want, got)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	s.wantConns(t, 2, "")
}

// TestBrokenConnection: a dropped connection fails the requests in flight
// with a ConnError, and the next request connects again.
func TestBrokenConnection(t *testing.T) {
	s, c := testClient(t, 1)
	ctx := context.Background()
	if _, err := echo(ctx, c, "ECHO", "a"); err != nil {
		t.Fatal(err)
	}
	slow := make(chan error, 1)
	go func() { _, err := echo(ctx, c, "SLEEP", "200", "x"); slow <- err }()
	time.Sleep(50 * time.Millisecond)
	_, err := echo(ctx, c, "DROP")
	var ce *ConnError
	if !errors.As(err, &ce) {
		t.Errorf("request that dropped the connection: %v, want a ConnError", err)
	}
	// The SLEEP was answered before the DROP was read, or failed with it.
	if err := <-slow; err != nil && !errors.As(err, &ce) {
		t.Errorf("request in flight: %v", err)
	}
	if got, err := echo(ctx, c, "ECHO", "b"); err != nil || got != "b" {
		t.Errorf("after reconnecting: %q, %v", got, err)
	}
	s.wantConns(t, 2, "")
}

// TestAbandon: a caller whose ctx ends returns at once; the late reply is
// dropped and the replies after it still reach their callers.
func TestAbandon(t *testing.T) {
	_, c := testClient(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	decoded := atomic.Bool{}
	err := c.Do(ctx, func(b []byte) []byte { return AppendCommand(b, "SLEEP", "150", "late") }, func(Value) error {
		decoded.Store(true)
		return nil
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want DeadlineExceeded", err)
	}
	if got, err := echo(context.Background(), c, "ECHO", "next"); err != nil || got != "next" {
		t.Errorf("next request: %q, %v", got, err)
	}
	if decoded.Load() {
		t.Error("the abandoned call's decoder ran")
	}
	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	if _, err := echo(cctx, c, "ECHO", "x"); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled before sending: %v", err)
	}
}

// TestDoBlocking: blocking requests run on their own connections; ending
// ctx closes the connection; idle ones are reused.
func TestDoBlocking(t *testing.T) {
	s, c := testClient(t, 1)
	ctx := context.Background()
	block := func(ctx context.Context, ms string) error {
		return c.DoBlocking(ctx, 5*time.Second, func(b []byte) []byte { return AppendCommand(b, "SLEEP", ms, "x") },
			func(v Value) error { return nil }, nil)
	}
	if err := block(ctx, "1"); err != nil {
		t.Fatal(err)
	}
	if err := block(ctx, "1"); err != nil {
		t.Fatal(err)
	}
	s.wantConns(t, 1, " after two sequential blocking calls (reused)")
	// A pipelined request is not held up by a blocking one: it is
	// answered while the blocking call (3 s) is still out. (A bound of
	// 250 ms beside a 300 ms sleep failed on one stall of the process.)
	done := make(chan error, 1)
	go func() { done <- block(ctx, "3000") }()
	if _, err := echo(ctx, c, "ECHO", "quick"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Errorf("the blocking call (3 s) ended (%v) before the pipelined request behind it was answered", err)
	default:
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := block(cctx, "5000"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("blocking call past its ctx: %v", err)
	}
	// Its reply is read in the background for up to CancelGrace, then the
	// connection is closed, not kept.
	var idle, busy int
	for deadline := time.Now().Add(CancelGrace + 5*time.Second); ; time.Sleep(10 * time.Millisecond) {
		c.mu.Lock()
		idle, busy = len(c.idle), len(c.busy)
		c.mu.Unlock()
		if busy == 0 && idle == 0 || time.Now().After(deadline) {
			break
		}
	}
	if busy != 0 || idle != 0 {
		t.Errorf("after a cancelled blocking call: %d idle, %d busy; want its connection closed", idle, busy)
	}
}

// TestStalledConnection: with Timeout set, a connection whose replies stop
// coming is closed, failing its requests, and the next request reconnects.
func TestStalledConnection(t *testing.T) {
	s := startTestServer(t)
	c := NewClient(ClientOptions{
		Dial:    s.dial,
		Conns:   1,
		Timeout: 2 * time.Second,
	})
	defer c.Close()
	ctx := context.Background()
	start := time.Now()
	_, err := echo(ctx, c, "SLEEP", "10000", "x")
	var ce *ConnError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "no reply") {
		t.Errorf("stalled request: %v, want a ConnError", err)
	}
	if d := time.Since(start); d > 9*time.Second {
		t.Errorf("stalled request failed after %s", d)
	}
	// A slow reply within the timeout is not a stall (with a 100 ms
	// timeout and a 50 ms reply, one stall of the process failed it).
	if got, err := echo(ctx, c, "SLEEP", "500", "y"); err != nil || got != "y" {
		t.Errorf("after reconnecting: %q, %v", got, err)
	}
}

func TestClientClose(t *testing.T) {
	s := startTestServer(t)
	c := s.client(2)
	ctx := context.Background()
	if _, err := echo(ctx, c, "ECHO", "a"); err != nil {
		t.Fatal(err)
	}
	inflight := make(chan error, 1)
	go func() { _, err := echo(ctx, c, "SLEEP", "5000", "x"); inflight <- err }()
	time.Sleep(20 * time.Millisecond)
	c.Close()
	if err := <-inflight; !errors.Is(err, ErrClientClosed) {
		t.Errorf("in flight at Close: %v", err)
	}
	if _, err := echo(ctx, c, "ECHO", "a"); !errors.Is(err, ErrClientClosed) {
		t.Errorf("after Close: %v", err)
	}
	if err := c.DoBlocking(ctx, 0, func(b []byte) []byte { return b }, nil, nil); !errors.Is(err, ErrClientClosed) {
		t.Errorf("blocking after Close: %v", err)
	}
}

func BenchmarkPipelinedEcho(b *testing.B) {
	s := startTestServer(&testing.T{})
	c := s.client(2)
	defer c.Close()
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := echo(ctx, c, "ECHO", "x"); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// TestSharedDial: callers needing a connection that is being opened wait
// for that one attempt, each within its own ctx.
func TestSharedDial(t *testing.T) {
	s := startTestServer(t)
	var dials atomic.Int32
	release := make(chan struct{})
	c := NewClient(ClientOptions{
		Dial: func(ctx context.Context) (net.Conn, error) {
			dials.Add(1)
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return s.dial(ctx)
		},
		Conns: 1,
	})
	defer c.Close()
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := echo(short, c, "ECHO", "x"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("caller with a short ctx: %v", err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got, err := echo(context.Background(), c, "ECHO", "y"); err != nil || got != "y" {
				t.Errorf("echo: %q, %v", got, err)
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	close(release)
	wg.Wait()
	if n := dials.Load(); n != 1 {
		t.Errorf("%d dials, want 1 shared", n)
	}
}

// TestBlockingDialDeadline: a blocking command's dial that the caller's
// deadline cuts fails with context.DeadlineExceeded, also when the dialer
// reports it its own way before ctx's timer has run.
func TestBlockingDialDeadline(t *testing.T) {
	c := NewClient(ClientOptions{
		Dial: func(ctx context.Context) (net.Conn, error) {
			d, _ := ctx.Deadline()
			time.Sleep(time.Until(d))
			return nil, errors.New("dial tcp 127.0.0.1:1: i/o timeout") // says nothing of ctx
		},
	})
	defer c.Close()
	for range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Millisecond)
		err := c.DoBlocking(ctx, 0, func(b []byte) []byte { return b }, func(Value) error { return nil }, nil)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("DoBlocking whose dial ran into the deadline: %v, want context.DeadlineExceeded", err)
		}
	}
}
