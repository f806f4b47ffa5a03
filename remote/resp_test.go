package remote_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
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

// respServer is a RESP server over a Backend on a loopback port. With an
// engine directory, restart closes server and engine and opens the same
// data again on the same port.
type respServer struct {
	t    testing.TB
	dir  string
	cfg  server.EngineConfig
	opts server.RESPOptions
	addr string

	mu   sync.Mutex
	b    server.Backend
	srv  *server.RESPServer
	done chan error
}

func startRESPEngine(t testing.TB, cfg server.EngineConfig, opts server.RESPOptions) *respServer {
	rs := &respServer{t: t, cfg: cfg, opts: opts, addr: "127.0.0.1:0"}
	rs.start(nil)
	t.Cleanup(rs.stop)
	return rs
}

func startRESPBackend(t testing.TB, b server.Backend, opts server.RESPOptions) *respServer {
	rs := &respServer{t: t, opts: opts, addr: "127.0.0.1:0"}
	rs.start(b)
	t.Cleanup(rs.stop)
	return rs
}

func (rs *respServer) start(b server.Backend) {
	if b == nil {
		eng, err := server.OpenEngine(rs.cfg)
		if err != nil {
			rs.t.Fatal(err)
		}
		b = eng
	}
	var ln net.Listener
	var err error
	for i := 0; i < 100; i++ { // the old port may take a moment to come free
		if ln, err = net.Listen("tcp", rs.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		rs.t.Fatal(err)
	}
	srv := server.NewRESPServer(b, rs.opts)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	rs.mu.Lock()
	rs.b, rs.srv, rs.done, rs.addr = b, srv, done, ln.Addr().String()
	rs.mu.Unlock()
}

func (rs *respServer) stop() {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rs.srv.Shutdown(ctx); err != nil {
		rs.t.Errorf("Shutdown: %v", err)
	}
	if err := <-rs.done; !errors.Is(err, server.ErrRESPServerClosed) {
		rs.t.Errorf("Serve returned %v", err)
	}
	rs.b.Close()
	rs.srv, rs.b = nil, nil
}

// restart stops the server and starts it again on the same port and data.
func (rs *respServer) restart() {
	rs.stop()
	rs.start(nil)
}

func (rs *respServer) url(query string) string {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return "leasehold://" + rs.addr + query
}

func (rs *respServer) backend() server.Backend {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.b
}

func (rs *respServer) open(t testing.TB, query string) *remote.RESPStore {
	t.Helper()
	s, err := remote.OpenRESP(rs.url(query))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRESPConformanceEngine runs the whole conformance suite over RESP
// against the durable engine; Reopen restarts the server on the same data.
func TestRESPConformanceEngine(t *testing.T) {
	rs := startRESPEngine(t, server.EngineConfig{Dir: t.TempDir()}, server.RESPOptions{})
	storetest.Run(t, storetest.Harness{
		Open: func(t testing.TB) leasehold.Store { return rs.open(t, "") },
		Reopen: func(t testing.TB, s leasehold.Store) leasehold.Store {
			s.Close()
			rs.restart()
			return rs.open(t, "")
		},
	})
}

// TestRESPConformanceProxy runs the suite over RESP against a Proxy in
// front of the memory store.
func TestRESPConformanceProxy(t *testing.T) {
	rs := startRESPBackend(t, server.NewProxy(memory.New(), server.ProxyConfig{}), server.RESPOptions{})
	storetest.Run(t, storetest.Harness{
		Open: func(t testing.TB) leasehold.Store { return rs.open(t, "?conns=1") },
	})
}

// BenchmarkRESPPairs: 32 goroutines (on 2 cores) each acquire and release
// distinct names through one RESPStore (pipelined over its shared
// connections) against an in-process server on the engine, durable (every
// grant group-committed with fdatasync) and NoSync.
func BenchmarkRESPPairs(b *testing.B) {
	for _, bc := range []struct {
		name   string
		noSync bool
	}{{"durable", false}, {"nosync", true}} {
		b.Run(bc.name, func(b *testing.B) {
			var syncs, records atomic.Int64
			hooks := server.Hooks{Sync: func(_ time.Duration, n int) { syncs.Add(1); records.Add(int64(n)) }}
			rs := startRESPEngine(b, server.EngineConfig{Dir: b.TempDir(), NoSync: bc.noSync, Hooks: hooks}, server.RESPOptions{})
			s := rs.open(b, "")
			defer s.Close()
			ctx := context.Background()
			var next atomic.Int64
			b.SetParallelism(max(1, 32/runtime.GOMAXPROCS(0)))
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				name := fmt.Sprintf("bench/%d", next.Add(1))
				for pb.Next() {
					rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: name, Owner: "bench", TTL: time.Minute})
					if err != nil {
						b.Error(err)
						return
					}
					if err := s.Release(ctx, name, "bench", rec.Token); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "pairs/s")
			if n := syncs.Load(); n > 0 {
				b.ReportMetric(float64(records.Load())/float64(n), "records/sync")
			}
		})
	}
}
