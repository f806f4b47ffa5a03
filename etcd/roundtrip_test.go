package etcd

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/randid"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// calls counts the gRPC requests a client sends: unary calls, and
// messages sent on streams (keepalives), by method.
//
// A stream message sent after a unary call's reply came back (within one
// take) is also counted as "after-reply": that is a second round trip.
// With hold set, each reply is delivered that much later, so a keepalive
// sent beside a Txn is not counted even if its goroutine starts late.
type calls struct {
	mu      sync.Mutex
	n       map[string]int
	replies int
	hold    time.Duration
}

func (c *calls) add(method string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[method[strings.LastIndex(method, "/")+1:]]++
}

// take returns the counts since the last take, as "Method×n" sorted.
func (c *calls) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n, c.replies = map[string]int{}, 0
	return n
}

type countingStream struct {
	grpc.ClientStream
	c      *calls
	method string
}

func (s countingStream) SendMsg(m any) error {
	s.c.add(s.method)
	s.c.mu.Lock()
	if s.c.replies > 0 {
		s.c.n["after-reply"]++
	}
	s.c.mu.Unlock()
	return s.ClientStream.SendMsg(m)
}

func (c *calls) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c.add(method)
	c.mu.Lock()
	hold := c.hold
	c.mu.Unlock()
	err := invoker(ctx, method, req, reply, cc, opts...)
	time.Sleep(hold)
	c.mu.Lock()
	c.replies++
	c.mu.Unlock()
	return err
}

func (c *calls) holdReplies(d time.Duration) {
	c.mu.Lock()
	c.hold = d
	c.mu.Unlock()
}

// countingClient is an etcd client whose requests are counted.
func countingClient(t *testing.T) (*clientv3.Client, *calls) {
	c := &calls{n: map[string]int{}}
	u, err := url.Parse(enginetest.EtcdURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: []string{u.Host}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{
			grpc.WithChainUnaryInterceptor(c.unary),
			grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				cs, err := streamer(ctx, desc, cc, method, opts...)
				if err != nil {
					return nil, err
				}
				return countingStream{cs, c, method}, nil
			}),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli, c
}

// TestRoundTrips counts the requests of each operation: a grant, a
// renewal, a Get and a refused TryAcquire are one request each, beside
// the keepalive (on the store's long-lived stream) that a grant or a
// renewal refreshes its etcd lease with, sent while the request is in
// flight (a renewal used to send it after its Txn's reply: two round
// trips); a refused TryAcquire for a holder
// this store knows nothing of asks etcd the holder's remaining time once,
// and not again while that time is more than a second away.
func TestRoundTrips(t *testing.T) {
	cli, c := countingClient(t)
	prefix := "leasehold-test/rt-" + randid.Hex(6) + "/"
	defer cli.Delete(context.Background(), prefix, clientv3.WithPrefix())
	s, err := New(cli, WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	other, err := New(cli, WithPrefix(prefix)) // another process, as far as leases go
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Warm up: spare etcd leases, the keepalive stream.
	for i := 0; i < 3; i++ {
		for _, st := range []*Store{s, other} {
			rec, err := st.TryAcquire(ctx, leasehold.AcquireRequest{Name: "warm", Owner: "a", TTL: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Release(ctx, "warm", "a", rec.Token); err != nil {
				t.Fatal(err)
			}
		}
	}
	time.Sleep(100 * time.Millisecond) // background refills
	c.take()
	check := func(what string, want string) {
		t.Helper()
		got := c.take()
		delete(got, "Watch")
		if s := fmt.Sprint(got); s != want {
			t.Errorf("%s: requests %s, want %s", what, s, want)
		}
	}
	rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "x", Owner: "a", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	check("TryAcquire (granted)", "map[LeaseKeepAlive:1 Txn:1]")
	c.holdReplies(200 * time.Millisecond)
	if err := s.Renew(ctx, "x", "a", rec.Token, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	c.holdReplies(0)
	check("Renew", "map[LeaseKeepAlive:1 Txn:1]")
	if got, err := s.Get(ctx, "x"); err != nil || got.Token != rec.Token || got.Remaining <= 0 || got.Remaining > 10*time.Second {
		t.Fatalf("Get: %+v, %v", got, err)
	}
	check("Get", "map[Range:1]")
	var he *leasehold.HeldError
	if _, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "x", Owner: "b", TTL: 10 * time.Second}); !errors.As(err, &he) || he.Token != rec.Token || he.Remaining <= 0 {
		t.Fatalf("refused TryAcquire: %v", err)
	}
	check("TryAcquire (refused)", "map[LeaseKeepAlive:1 Txn:1]")
	// Another store learns the holder's remaining time once.
	for i, want := range []string{"map[LeaseKeepAlive:1 LeaseTimeToLive:1 Txn:1]", "map[LeaseKeepAlive:1 Txn:1]"} {
		if _, err := other.TryAcquire(ctx, leasehold.AcquireRequest{Name: "x", Owner: "b", TTL: 10 * time.Second}); !errors.As(err, &he) {
			t.Fatalf("refused TryAcquire in another store: %v", err)
		}
		check(fmt.Sprintf("TryAcquire (refused) in another store, #%d", i+1), want)
	}
	if err := s.Release(ctx, "x", "a", rec.Token); err != nil {
		t.Fatal(err)
	}
	check("Release", "map[Txn:1]")
}
