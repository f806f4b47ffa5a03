package cli

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/server"
	"github.com/leasehold/leasehold/stores"
	"github.com/leasehold/leasehold/testrig/servertest"
)

// TestRunPermitsWaitsOnServer (issue 27, item 3): `run --permits 2` with
// both permits held waits in the lease server's queue of the semaphore:
// the server counts it as a waiter and lists it on the permits (it counted
// none: the wait was a loop in the client), and a release hands it the
// permit.
func TestRunPermitsWaitsOnServer(t *testing.T) {
	eng, err := server.OpenEngine(server.EngineConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(server.NewHandler(eng, server.HandlerOptions{}))
	defer ts.Close()
	defer eng.Close()
	ctx := context.Background()
	var held []leasehold.Record
	for i, o := range []string{"A", "B"} {
		rec, err := eng.Acquire(ctx, server.AcquireRequest{AcquireRequest: leasehold.AcquireRequest{
			Name: fmt.Sprintf("pool/permit/%d", i), Owner: o, TTL: time.Minute}})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, rec)
	}
	h := newHarness(t)
	_, done := h.start("run", "--store", ts.URL, "--permits", "2", "-w", "50s", "pool", "--", "true")
	servertest.WaitFor(t, "run to wait on the server", func() bool { return eng.Stats().Waiters == 1 })
	if ws := eng.Waiters("pool/permit/1"); len(ws) != 1 {
		t.Errorf("Waiters(pool/permit/1) = %+v, want run's", ws)
	}
	if err := eng.Release(ctx, held[1].Name, held[1].Owner, held[1].Token); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.code != 0 {
			t.Fatalf("run: exit %d; stderr %q", r.code, r.stderr)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("run did not finish within 60 s of the release")
	}
}

// TestPermitMismatchServer is TestPermitMismatch through the lease server,
// where "run --permits" waits in the server's queue of the semaphore.
func TestPermitMismatchServer(t *testing.T) {
	eng, err := server.OpenEngine(server.EngineConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(server.NewHandler(eng, server.HandlerOptions{}))
	defer ts.Close()
	defer eng.Close()
	s, err := stores.Open(t.Context(), ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := leasehold.New(s, leasehold.WithOwner("A"))
	if err != nil {
		t.Fatal(err)
	}
	permitMismatch(t, newHarness(t), ts.URL, c)
}
