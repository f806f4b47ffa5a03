package server

// The proxy (proxy.go). Reads and events: passed through to the store or served from the proxy's hub.

import (
	"context"
	"errors"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storekit"
)

// Subscribe implements Backend (through the package's event hub, as the
// Engine does).
func (p *Proxy) Subscribe(ctx context.Context, prefix string) <-chan Event {
	return p.hub.subscribe(ctx, prefix)
}

// Recent implements Backend.
func (p *Proxy) Recent(n int) []Event { return p.hub.recent(n) }

// Get implements Backend.
func (p *Proxy) Get(ctx context.Context, name string) (leasehold.Record, error) {
	if err := storekit.ValidateName(name); err != nil {
		return leasehold.Record{}, err
	}
	return p.store.Get(ctx, name)
}

// List implements Backend.
func (p *Proxy) List(ctx context.Context, prefix string) ([]leasehold.Record, error) {
	if err := storekit.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	return p.store.List(ctx, prefix)
}

// proxyReadyName is read by Ready; it need not exist.
const proxyReadyName = "leasehold/readyz"

// Ready implements Backend: one Get on the store.
func (p *Proxy) Ready(ctx context.Context) error {
	if p.isClosed() {
		return leasehold.ErrClosed
	}
	_, err := p.store.Get(ctx, proxyReadyName)
	if err == nil || errors.Is(err, leasehold.ErrNotFound) {
		return nil
	}
	return err
}

// Stats implements Backend. Held is an estimate: a count of the store's
// live leases (List of everything) taken at most every HeldRefresh, in
// the background, adjusted by this proxy's grants and releases since.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	st := Stats{Waiters: p.waiting, Sessions: len(p.sessions), Durable: p.cfg.Durable}
	now := p.clock.Now()
	if !p.closed && !p.heldBusy && (p.heldAt.IsZero() || now.Sub(p.heldAt) >= p.cfg.HeldRefresh) {
		p.heldBusy = true
		p.wg.Add(1)
		go p.recountHeld()
	}
	p.mu.Unlock()
	st.Held = int(max(p.held.Load(), 0))
	return st
}

func (p *Proxy) recountHeld() {
	defer p.wg.Done()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	recs, err := p.store.List(ctx, "")
	p.mu.Lock()
	defer p.mu.Unlock()
	p.heldBusy = false
	p.heldAt = p.clock.Now()
	if err != nil {
		p.log.Warn("leasehold proxy: counting leases failed", "err", err)
		return
	}
	p.held.Store(int64(len(recs)))
}
