package remote_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/server"
)

// TestRESPReconnect: when the server restarts, requests in flight on the
// RESP store's shared connections fail with an error saying so, and the
// store reconnects by itself.
func TestRESPReconnect(t *testing.T) {
	ts := startEngine(t, respTransport, server.EngineConfig{Dir: t.TempDir()}, serveOptions{})
	s := ts.open(t, "?conns=2")
	ctx := ctxT(t)
	rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "r/x", Owner: "a", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	waitErr := make(chan error, 1)
	go func() {
		_, err := s.AcquireWait(ctx, leasehold.AcquireRequest{Name: "r/x", Owner: "b", TTL: time.Minute})
		waitErr <- err
	}()
	ts.waiters(t, "r/x", 1)
	ts.restart()
	if err := <-waitErr; err == nil || errors.Is(err, leasehold.ErrHeld) {
		t.Errorf("AcquireWait across a restart: %v, want an error", err)
	}
	// Every shared connection broke; the first requests reconnect.
	for i := 0; i < 4; i++ {
		got, err := s.Get(ctx, "r/x")
		if err != nil {
			if !strings.Contains(err.Error(), "may or may not have taken effect") && !strings.Contains(err.Error(), "connect") {
				t.Errorf("request %d after the restart: %v", i, err)
			}
			continue
		}
		if got.Token != rec.Token || got.Owner != "a" {
			t.Errorf("lease after restart: %+v", got)
		}
	}
	if got, err := s.Get(ctx, "r/x"); err != nil || got.Token != rec.Token {
		t.Errorf("after reconnecting: %+v, %v", got, err)
	}
	if err := s.Release(ctx, "r/x", "a", rec.Token); err != nil {
		t.Error(err)
	}
}
