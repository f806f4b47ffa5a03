package remote_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/remote"
	"github.com/leasehold/leasehold/server"
	"github.com/leasehold/leasehold/storetest"
)

// engineServer is a server over a durable Engine in dir; restart closes it
// and opens the same data again on a new port.
type engineServer struct {
	t    testing.TB
	dir  string
	opts server.HandlerOptions

	mu  sync.Mutex
	eng *server.Engine
	srv *httptest.Server
}

func startEngine(t testing.TB, opts server.HandlerOptions) *engineServer {
	es := &engineServer{t: t, dir: t.TempDir(), opts: opts}
	es.start()
	t.Cleanup(es.stop)
	return es
}

func (es *engineServer) start() {
	eng, err := server.OpenEngine(server.EngineConfig{Dir: es.dir, NoSync: true})
	if err != nil {
		es.t.Fatal(err)
	}
	es.mu.Lock()
	es.eng = eng
	es.srv = httptest.NewServer(server.NewHandler(eng, es.opts))
	es.mu.Unlock()
}

func (es *engineServer) stop() {
	es.mu.Lock()
	defer es.mu.Unlock()
	if es.srv != nil {
		es.srv.CloseClientConnections()
		es.srv.Close()
		es.eng.Close()
		es.srv, es.eng = nil, nil
	}
}

func (es *engineServer) url() string {
	es.mu.Lock()
	defer es.mu.Unlock()
	return es.srv.URL
}

func (es *engineServer) open(t testing.TB, query string) *remote.HTTPStore {
	t.Helper()
	s, err := remote.OpenHTTP(es.url() + query)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestConformanceEngine runs the whole conformance suite through HTTP
// against the native engine, restarts included.
func TestConformanceEngine(t *testing.T) {
	es := startEngine(t, server.HandlerOptions{})
	storetest.Run(t, storetest.Harness{
		Open: func(t testing.TB) leasehold.Store { return es.open(t, "") },
		Reopen: func(t testing.TB, s leasehold.Store) leasehold.Store {
			s.Close()
			es.stop()
			es.start()
			return es.open(t, "")
		},
	})
}

// TestConformanceProxy runs the suite through HTTP against a Proxy in
// front of the memory store.
func TestConformanceProxy(t *testing.T) {
	p := server.NewProxy(memory.New(), server.ProxyConfig{})
	srv := httptest.NewServer(server.NewHandler(p, server.HandlerOptions{}))
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close(); p.Close() })
	storetest.Run(t, storetest.Harness{
		Open: func(t testing.TB) leasehold.Store {
			s, err := remote.OpenHTTP(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	})
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestOpenHTTPURLs(t *testing.T) {
	for _, bad := range []string{
		"ftp://host", "http://", "http://u:p@host", "http://host?nope=1", "http://host?ca=/x",
		"https://host?ca=/does/not/exist", "http://host?timeout=-1s", "https://host?cert=/x",
	} {
		if _, err := remote.OpenHTTP(bad); !errors.Is(err, leasehold.ErrInvalid) {
			t.Errorf("OpenHTTP(%q) = %v, want an *InvalidError", bad, err)
		}
	}
	s, err := remote.OpenHTTP("http://127.0.0.1:1/prefix/?token=x&timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}

func TestErrorsMapBack(t *testing.T) {
	es := startEngine(t, server.HandlerOptions{})
	s := es.open(t, "")
	defer s.Close()
	ctx := ctxT(t)
	rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "m/x", Owner: "a", TTL: time.Minute, Data: []byte{0xff, 0}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "m/x", Owner: "b", TTL: time.Minute})
	var he *leasehold.HeldError
	if !errors.As(err, &he) || he.Owner != "a" || he.Token != rec.Token || he.Name != "m/x" || he.Remaining <= 0 || he.Acquired.IsZero() {
		t.Errorf("held: %#v", err)
	}
	if err := s.Renew(ctx, "m/x", "b", rec.Token, time.Minute); !errors.Is(err, leasehold.ErrNotHeld) {
		t.Errorf("renew by another: %v", err)
	}
	if _, err := s.Get(ctx, "m/none"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Errorf("get of none: %v", err)
	}
	// The server's own name rules come back as *InvalidError with the field.
	_, err = s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "m/../x", Owner: "a", TTL: time.Minute})
	var ie *leasehold.InvalidError
	if !errors.As(err, &ie) || ie.Field != "name" || ie.Reason == "" {
		t.Errorf("dot-dot name: %#v", err)
	}
	if _, err := s.ForceRelease(ctx, "m/x"); err != nil {
		t.Errorf("force release: %v", err)
	}
	if _, err := s.ForceRelease(ctx, "m/x"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Errorf("second force release: %v", err)
	}
	if err := s.Ready(ctx); err != nil {
		t.Errorf("ready: %v", err)
	}
	s.Close()
	if _, err := s.Get(ctx, "m/x"); !errors.Is(err, leasehold.ErrClosed) {
		t.Errorf("after close: %v", err)
	}
}

func TestAuthErrors(t *testing.T) {
	auth, err := server.NewAuth(server.AuthConfig{Tokens: []server.TokenConfig{
		{Identity: "reader", Token: "r", Grants: []server.Grant{{Prefix: "", Access: "read"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	es := startEngine(t, server.HandlerOptions{Auth: auth})
	ctx := ctxT(t)
	req := leasehold.AcquireRequest{Name: "a/x", Owner: "o", TTL: time.Minute}
	none := es.open(t, "")
	if _, err := none.TryAcquire(ctx, req); !errors.Is(err, remote.ErrUnauthorized) {
		t.Errorf("no token: %v", err)
	}
	reader := es.open(t, "?token=r")
	_, err = reader.TryAcquire(ctx, req)
	var pe *remote.ProblemError
	if !errors.Is(err, remote.ErrForbidden) || !errors.As(err, &pe) || pe.Status != 403 {
		t.Errorf("reader acquires: %v", err)
	}
	if recs, err := reader.List(ctx, ""); err != nil || len(recs) != 0 {
		t.Errorf("reader lists: %v, %v", recs, err)
	}
	t.Setenv(remote.EnvAuthToken, "r")
	env := es.open(t, "")
	if _, err := env.List(ctx, ""); err != nil {
		t.Errorf("token from the environment: %v", err)
	}
}

// TestAcquireWaitFIFO: waiters queued through the long-poll are granted in
// arrival order as the holder releases.
func TestAcquireWaitFIFO(t *testing.T) {
	es := startEngine(t, server.HandlerOptions{})
	s := es.open(t, "")
	defer s.Close()
	ctx := ctxT(t)
	first, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "q", Owner: "holder", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	order := make(chan string, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		owner := string(rune('a' + i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec, err := s.AcquireWait(ctx, leasehold.AcquireRequest{Name: "q", Owner: owner, TTL: time.Minute})
			if err != nil {
				t.Error(err)
				return
			}
			order <- owner
			if err := s.Release(ctx, "q", owner, rec.Token); err != nil {
				t.Error(err)
			}
		}()
		// Queue them one by one so that the arrival order is known.
		waitFor(t, func() bool { return len(es.eng.Waiters("q")) == i+1 })
	}
	if err := s.Release(ctx, "q", "holder", first.Token); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(order)
	var got []string
	for o := range order {
		got = append(got, o)
	}
	if strings.Join(got, "") != "abcd" {
		t.Errorf("grant order %v, want a b c d", got)
	}
}

// TestAcquireWaitCancel: cancelling a long-poll drops the waiter and
// leaves the holder alone.
func TestAcquireWaitCancel(t *testing.T) {
	es := startEngine(t, server.HandlerOptions{})
	s := es.open(t, "")
	defer s.Close()
	ctx := ctxT(t)
	h, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "c", Owner: "holder", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := s.AcquireWait(wctx, leasehold.AcquireRequest{Name: "c", Owner: "w", TTL: time.Minute})
		done <- err
	}()
	waitFor(t, func() bool { return len(es.eng.Waiters("c")) == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("AcquireWait after cancel: %v", err)
	}
	waitFor(t, func() bool { return len(es.eng.Waiters("c")) == 0 })
	if got, err := s.Get(ctx, "c"); err != nil || got.Token != h.Token {
		t.Errorf("holder after a cancelled wait: %+v, %v", got, err)
	}
}

func TestSession(t *testing.T) {
	es := startEngine(t, server.HandlerOptions{})
	s := es.open(t, "")
	defer s.Close()
	ctx := ctxT(t)
	sess, err := s.OpenSession(ctx, 600*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	ss := sess.Store()
	c, _ := leasehold.New(ss, leasehold.WithOwner("sessioned"))
	l, err := c.TryAcquire(ctx, "sess/a", leasehold.TTL(time.Minute), leasehold.NoKeepalive())
	if err != nil {
		t.Fatal(err)
	}
	// The session's keepalive holds it past several session TTLs.
	time.Sleep(2 * time.Second)
	if err := sess.Err(); err != nil {
		t.Fatalf("session lost: %v", err)
	}
	if got, err := s.Get(ctx, "sess/a"); err != nil || got.Token != l.Token() {
		t.Fatalf("session lease: %+v, %v", got, err)
	}
	ss.Close() // a no-op
	if err := sess.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "sess/a"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Errorf("lease after the session closed: %v", err)
	}
	if err := sess.Close(ctx); err != nil {
		t.Errorf("second close: %v", err)
	}
	// Acquiring through a closed session is refused.
	if _, err := ss.TryAcquire(ctx, leasehold.AcquireRequest{Name: "sess/b", Owner: "o", TTL: time.Minute}); !errors.Is(err, remote.ErrNoSession) {
		t.Errorf("acquire in a closed session: %v", err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// BenchmarkHTTPAcquireRelease measures acquire+release pairs over HTTP
// with 32 concurrent clients, each on its own name, against the engine in
// the same process (fsync on, and off).
func BenchmarkHTTPAcquireRelease(b *testing.B) {
	for _, noSync := range []bool{false, true} {
		name := "fsync"
		if noSync {
			name = "nosync"
		}
		b.Run(name, func(b *testing.B) {
			eng, err := server.OpenEngine(server.EngineConfig{Dir: b.TempDir(), NoSync: noSync})
			if err != nil {
				b.Fatal(err)
			}
			srv := httptest.NewServer(server.NewHandler(eng, server.HandlerOptions{}))
			defer func() { srv.Close(); eng.Close() }()
			s, err := remote.OpenHTTP(srv.URL)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var next atomic.Int64
			b.SetParallelism(max(1, 32/runtime.GOMAXPROCS(0)))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				n := fmt.Sprintf("bench/%d", next.Add(1))
				for pb.Next() {
					rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: n, Owner: "o", TTL: time.Minute})
					if err != nil {
						b.Error(err)
						return
					}
					if err := s.Release(ctx, n, "o", rec.Token); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
		})
	}
}

// BenchmarkHTTPHandoff measures same-name handoffs over HTTP: 8 clients
// take turns on one name through the server's FIFO queue (AcquireWait
// long-polls), each releasing at once.
func BenchmarkHTTPHandoff(b *testing.B) {
	eng, err := server.OpenEngine(server.EngineConfig{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(server.NewHandler(eng, server.HandlerOptions{}))
	defer func() { srv.Close(); eng.Close() }()
	s, err := remote.OpenHTTP(srv.URL)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	b.ResetTimer()
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			owner := fmt.Sprintf("w%d", w)
			for left.Add(-1) >= 0 {
				rec, err := s.AcquireWait(ctx, leasehold.AcquireRequest{Name: "hot", Owner: owner, TTL: time.Minute})
				if err != nil {
					b.Error(err)
					return
				}
				if err := s.Release(ctx, "hot", owner, rec.Token); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "handoffs/s")
}
