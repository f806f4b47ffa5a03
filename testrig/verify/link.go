package verify

import (
	"context"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
)

// Link is a fault layer between one logical process's Client and its
// recorder (set up in InProcess.Wrap): it can freeze every call (a paused
// or suspended process), cut the process's renewals off (they hang until
// their context ends and never reach the store), hold back granted acquire
// replies, and make the process rest after each release, so that it does
// not take the lease straight back before the processes waiting for it
// poll again. A release ends a cut: the holder is done, and its release
// must arrive. Calls it does not pass on are not recorded.
type Link struct {
	Inner leasehold.Store
	Delay time.Duration // added to every granted acquire's reply
	Rest  time.Duration // after each release
	// Drop: a call whose context ended while the link was frozen is not
	// sent (it returns the context's error). Otherwise it is sent on thaw.
	Drop bool

	mu     sync.Mutex
	cut    bool
	thawed chan struct{} // non-nil while frozen
}

// SetCut cuts the renewals off, or ends that.
func (l *Link) SetCut(cut bool) {
	l.mu.Lock()
	l.cut = cut
	l.mu.Unlock()
}

// Freeze holds every call until Thaw.
func (l *Link) Freeze() {
	l.mu.Lock()
	if l.thawed == nil {
		l.thawed = make(chan struct{})
	}
	l.mu.Unlock()
}

// Thaw lets the held calls and the later ones through.
func (l *Link) Thaw() {
	l.mu.Lock()
	if l.thawed != nil {
		close(l.thawed)
		l.thawed = nil
	}
	l.mu.Unlock()
}

// wait blocks while the link is frozen (a suspended process neither sends
// nor notices its deadlines passing) and reports whether renewals are cut;
// with Drop, it returns ctx's error if ctx ended meanwhile.
func (l *Link) wait(ctx context.Context) (cut bool, err error) {
	l.mu.Lock()
	ch := l.thawed
	l.mu.Unlock()
	if ch != nil {
		<-ch
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.Drop {
		err = ctx.Err()
	}
	return l.cut, err
}

func (l *Link) TryAcquire(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	if _, err := l.wait(ctx); err != nil {
		return leasehold.Record{}, err
	}
	rec, err := l.Inner.TryAcquire(ctx, req)
	if err == nil && l.Delay > 0 {
		time.Sleep(l.Delay)
	}
	return rec, err
}

func (l *Link) Renew(ctx context.Context, name, owner string, token uint64, ttl time.Duration) error {
	cut, err := l.wait(ctx)
	if err != nil {
		return err
	}
	if cut {
		<-ctx.Done() // lost on the way
		return ctx.Err()
	}
	return l.Inner.Renew(ctx, name, owner, token, ttl)
}

func (l *Link) Release(ctx context.Context, name, owner string, token uint64) error {
	if _, err := l.wait(ctx); err != nil {
		return err
	}
	l.SetCut(false)
	err := l.Inner.Release(ctx, name, owner, token)
	time.Sleep(l.Rest)
	return err
}

func (l *Link) Get(ctx context.Context, name string) (leasehold.Record, error) {
	return l.Inner.Get(ctx, name)
}

func (l *Link) List(ctx context.Context, prefix string) ([]leasehold.Record, error) {
	return l.Inner.List(ctx, prefix)
}

// Close does nothing: the store behind is not the link's.
func (l *Link) Close() error { return nil }
