package remote_test

import (
	"context"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/remote"
	"github.com/leasehold/leasehold/server"
)

// TestSessionCloseLosesLeasesFirst: when Close makes the server free a
// session's lease, the client's lease no longer counts as held — checked at
// the moment the server emits the release, on both transports.
func TestSessionCloseLosesLeasesFirst(t *testing.T) {
	var lp atomic.Pointer[leasehold.Lease]
	var seen atomic.Int32 // 1: held when freed, 2: not held
	eng, err := server.OpenEngine(server.EngineConfig{Hooks: server.Hooks{Event: func(ev server.Event) {
		if ev.Type != server.EventReleased {
			return
		}
		if l := lp.Load(); l != nil && l.Name() == ev.Name {
			if l.Held() {
				seen.Store(1)
			} else {
				seen.Store(2)
			}
		}
	}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(server.NewHandler(eng, server.HandlerOptions{}))
	defer func() { srv.CloseClientConnections(); srv.Close(); eng.Close() }()
	rs := startRESPBackend(t, eng, server.RESPOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, proto := range []string{"http", "resp"} {
		seen.Store(0)
		lp.Store(nil)
		var closer interface{ Close(context.Context) error }
		var st leasehold.Store
		if proto == "http" {
			s, err := remote.OpenHTTP(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			x, err := s.OpenSession(ctx, 3*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			closer, st = x, x.Store()
		} else {
			s := rs.open(t, "")
			defer s.Close()
			x, err := s.OpenSession(ctx, 3*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			closer, st = x, x.Store()
		}
		c, err := leasehold.New(st, leasehold.WithOwner("a"))
		if err != nil {
			t.Fatal(err)
		}
		l, err := c.TryAcquire(ctx, "close/"+proto, leasehold.TTL(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		lp.Store(l)
		if err := closer.Close(ctx); err != nil {
			t.Fatalf("%s: Close: %v", proto, err)
		}
		switch seen.Load() {
		case 0:
			t.Errorf("%s: the server did not free the lease on Close", proto)
		case 1:
			t.Errorf("%s: the lease still counted as held when the server freed it", proto)
		}
		if l.Held() {
			t.Errorf("%s: lease held after its session was closed", proto)
		}
	}
}
