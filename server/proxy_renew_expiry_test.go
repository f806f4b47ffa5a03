package server

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/memory"
)

// TestProxyRenewSpanningSessionExpiry: the session expires while the
// holder's own Renew is at the store. The proxy frees the lease once the
// renewal is back, so the renewal must be refused, not confirmed.
func TestProxyRenewSpanningSessionExpiry(t *testing.T) {
	fc := clock.NewFake(time.Unix(1_000_000, 0))
	gs := &pxGatedRenew{Store: memory.New(memory.WithClock(fc)), name: "held", started: make(chan struct{}), gate: make(chan struct{})}
	p := pxNew(t, gs, ProxyConfig{Clock: fc})
	var openGate sync.Once
	defer openGate.Do(func() { close(gs.gate) })
	ctx := context.Background()
	sess, err := p.OpenSession(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	held := pxReq("held", "o", time.Hour)
	held.Session = sess.ID
	rec := pxAcquire(t, p, held)
	res := make(chan error, 1)
	go func() { res <- p.Renew(ctx, "held", "o", rec.Token, 5*time.Second) }()
	<-gs.started
	fc.Advance(2 * time.Second) // past the 1 s session while the Renew is at the store
	openGate.Do(func() { close(gs.gate) })
	if err := <-res; !errors.Is(err, leasehold.ErrNotHeld) {
		t.Fatalf("a Renew that spanned its session's expiry returned %v, want ErrNotHeld", err)
	}
	pxWaitUntil(t, "the lease released", func() bool { _, err := p.Get(ctx, "held"); return err != nil })
}
