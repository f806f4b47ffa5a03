package leasehold

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasehold/leasehold/internal/backoff"
	"github.com/leasehold/leasehold/internal/mutation"
)

// maxSleep bounds every wait of the keepalive goroutine, so a holder that
// was suspended (when the monotonic clock and its timers stand still)
// notices within this long after resuming that its boot-time deadline passed.
const maxSleep = time.Second

// Lease is a granted lease. Its keepalive goroutine renews it at about a
// third of its TTL until Release, or until it is lost.
//
// A Lease knows conservatively when it stops holding: its local deadline is
// t0 + TTL*(1-rho) - eps, where t0 is taken before the request that granted
// or last renewed it was sent, and it is checked on both the monotonic and
// the boot-time clock. Past that deadline without a confirmed renewal, or as
// soon as the store refuses a renewal, the lease is lost: Done closes and Err
// returns an error matching ErrLost. An unknown outcome counts as lost.
//
// A lease granted through a BoundedStore (a session store of package
// remote) is also lost no later than its Bound, the session: its deadline is
// the earlier of its own and the session's (which is as conservative:
// t0 + TTL*(1-rho) - eps from before the session's last confirmed keepalive,
// on both clocks), and when the session ends — expired, refused by the
// server, or closed — the lease is lost at once. Renewing the lease does not
// extend its session.
//
// Holding a Lease does not fence writes by itself: give Token to the
// resource you write so that it rejects writers with an older token.
type Lease struct {
	c         *Client
	name      string
	owner     string
	token     uint64
	requestID string
	data      []byte
	acquired  time.Time

	mu           sync.Mutex
	ttl          time.Duration
	bound        Bound         // what the lease cannot outlive (its session), or nil
	deadline     time.Time     // monotonic local deadline
	deadlineBoot time.Duration // the same deadline on the boot-time clock
	err          error         // why Done closed
	done         chan struct{}

	relMu    sync.Mutex // serialises Release
	released bool
	stopOnce sync.Once
	stop     chan struct{}
	stopped  chan struct{}
}

func (c *Client) newLease(rec Record, requestID string, t0 time.Time, b0 time.Duration, keepalive bool) *Lease {
	l := &Lease{
		c: c, name: rec.Name, owner: rec.Owner, token: rec.Token, requestID: requestID,
		data: rec.Data, acquired: rec.Acquired, ttl: rec.TTL,
		done: make(chan struct{}), stop: make(chan struct{}), stopped: make(chan struct{}),
	}
	if bs, ok := c.store.(BoundedStore); ok {
		l.bound = bs.LeaseBound(rec)
	}
	l.extend(t0, b0, rec.TTL)
	go l.run(keepalive, t0.Add(rec.TTL/3))
	return l
}

// Name returns the lease's name.
func (l *Lease) Name() string { return l.name }

// Owner returns the owner identity the lease was granted to.
func (l *Lease) Owner() string { return l.owner }

// Token returns the fencing token: strictly greater than the token of every
// earlier grant of this name.
func (l *Lease) Token() uint64 { return l.token }

// Data returns the data attached at acquire.
func (l *Lease) Data() []byte { return l.data }

// RequestID returns the request id of the acquire that was granted.
func (l *Lease) RequestID() string { return l.requestID }

// Acquired returns the wall-clock time the store recorded for the grant.
func (l *Lease) Acquired() time.Time { return l.acquired }

// TTL returns the lease's time to live.
func (l *Lease) TTL() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}

// Deadline returns the local deadline: the moment (on the client's clock)
// until which the lease is known to be held unless a renewal is confirmed.
// For a lease bound to a session it is the earlier of the lease's own
// deadline and the session's (which a keepalive of the session moves on).
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	d, _ := l.deadlinesLocked()
	return d
}

// deadlinesLocked returns the lease's local deadline on the monotonic and
// the boot-time clock: its own, or its Bound's where that is earlier.
func (l *Lease) deadlinesLocked() (time.Time, time.Duration) {
	d, b := l.deadline, l.deadlineBoot
	if l.bound != nil {
		bd, bb := l.bound.Deadline()
		if bd.Before(d) {
			d = bd
		}
		b = min(b, bb)
	}
	return d, b
}

// Done returns a channel that is closed when the lease is lost or released.
func (l *Lease) Done() <-chan struct{} { return l.done }

// Err returns nil while the lease is held; after Done closes, an error
// matching ErrLost or ErrReleased.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Held reports whether the lease is still known to be held right now,
// checking the local deadline on both clocks and the end of its session, if
// it has one (not only the Done channel, which the keepalive goroutine
// closes shortly after). Once it has returned false it never returns true
// again: if it finds the lease lost, Done is closed at once.
func (l *Lease) Held() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return false
	}
	if err := l.lostLocked(); err != nil {
		l.finishLocked(err)
		return false
	}
	return true
}

// Context returns a context derived from parent that is cancelled, with
// Err as its cause, when the lease is lost or released. Call cancel when done
// with it.
func (l *Lease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	go func() {
		select {
		case <-l.done:
			cancel(l.Err())
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// Renew renews the lease now, for its TTL, from the moment before the
// request is sent. The keepalive goroutine does this by itself unless the
// lease was acquired with NoKeepalive. If the store refuses, the lease is
// lost and Renew returns an error matching ErrLost.
func (l *Lease) Renew(ctx context.Context) error {
	if err := l.Err(); err != nil {
		return err
	}
	return l.renewOnce(ctx)
}

// Release stops the keepalive and releases the lease on the store, checked
// by owner and token. Done closes at once. Releasing again returns nil. If
// the store says the lease was no longer ours (it expired and was taken
// over), Release returns an error matching ErrLost; nothing else changes.
// If the store cannot be reached the error is returned and Release may be
// called again; otherwise the lease expires after its TTL.
func (l *Lease) Release(ctx context.Context) error {
	l.relMu.Lock()
	defer l.relMu.Unlock()
	if l.released {
		return nil
	}
	l.stopOnce.Do(func() { close(l.stop) })
	<-l.stopped
	l.finish(ErrReleased)
	err := l.c.store.Release(ctx, l.name, l.owner, l.token)
	switch {
	case err == nil:
		l.released = true
		return nil
	case errors.Is(err, ErrNotHeld):
		l.released = true
		return fmt.Errorf("%w: release %q (token %d): the store no longer had it for this owner", ErrLost, l.name, l.token)
	default:
		return fmt.Errorf("release %q: %w", l.name, err)
	}
}

func (l *Lease) extend(t0 time.Time, b0 time.Duration, ttl time.Duration) {
	life := ttl - l.c.margin(ttl)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ttl = ttl
	l.deadline = t0.Add(life)
	l.deadlineBoot = b0 + life
}

// lostLocked returns why the lease is no longer known to be held right now,
// or nil while it is: its own local deadline passed (on either clock), or
// its Bound ended or its Bound's deadline passed.
func (l *Lease) lostLocked() error {
	now, boot := l.c.clock.Now(), l.c.clock.Boot()
	if !now.Before(l.deadline) || boot >= l.deadlineBoot {
		return fmt.Errorf("%w: %q (token %d): local deadline passed without a confirmed renewal", ErrLost, l.name, l.token)
	}
	if l.bound == nil {
		return nil
	}
	select {
	case <-l.bound.Done():
		why := l.bound.Err()
		if why == nil {
			why = errors.New("no reason given")
		}
		return fmt.Errorf("%w: %q (token %d): its session ended: %w", ErrLost, l.name, l.token, why)
	default:
	}
	if bd, bb := l.bound.Deadline(); !now.Before(bd) || boot >= bb {
		return fmt.Errorf("%w: %q (token %d): its session's local deadline passed without a confirmed keepalive", ErrLost, l.name, l.token)
	}
	return nil
}

// boundDone is the Bound's Done channel, or nil (never ready) without one.
func (l *Lease) boundDone() <-chan struct{} {
	if l.bound == nil {
		return nil
	}
	return l.bound.Done()
}

// finish closes Done with err unless it is closed already.
func (l *Lease) finish(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.finishLocked(err)
}

func (l *Lease) finishLocked(err error) {
	if l.err != nil {
		return
	}
	l.err = err
	close(l.done)
}

func (l *Lease) renewOnce(ctx context.Context) error {
	k := l.c.clock
	t0, b0 := k.Now(), k.Boot()
	ttl := l.TTL()
	err := l.c.store.Renew(ctx, l.name, l.owner, l.token, ttl)
	if mutation.On("deadline-from-reply") {
		t0, b0 = k.Now(), k.Boot()
	}
	switch {
	case err == nil:
		l.mu.Lock()
		lost, late := l.err != nil, l.lostLocked()
		l.mu.Unlock()
		if lost {
			return l.Err()
		}
		if late != nil {
			// Confirmed only after the local deadline (the lease's own or
			// its session's): for a while nobody could prove it held, so it
			// counts as lost.
			lerr := fmt.Errorf("%w: renew %q (token %d) confirmed after the local deadline: %v", ErrLost, l.name, l.token, late)
			l.finish(lerr)
			return lerr
		}
		l.extend(t0, b0, ttl)
		return nil
	case errors.Is(err, ErrNotHeld):
		lerr := fmt.Errorf("%w: renew %q (token %d) refused: the store no longer has it for this owner", ErrLost, l.name, l.token)
		l.finish(lerr)
		return lerr
	default:
		return fmt.Errorf("renew %q: %w", l.name, err)
	}
}

// run is the lease's goroutine: it renews at about TTL/3 (when keepalive is
// on) and closes Done once the local deadline (its own or its session's)
// passes unconfirmed, or its session ends.
func (l *Lease) run(keepalive bool, renewAt time.Time) {
	defer close(l.stopped)
	k := l.c.clock
	boundDone := l.boundDone()
	retry := backoff.New(max(l.TTL()/50, time.Millisecond), max(l.TTL()/10, time.Millisecond))
	for {
		l.mu.Lock()
		lost := l.lostLocked()
		deadline, _ := l.deadlinesLocked()
		l.mu.Unlock()
		if lost != nil {
			l.finish(lost)
			return
		}
		now := k.Now()
		if !keepalive || now.Before(renewAt) {
			wake := deadline
			if keepalive && renewAt.Before(wake) {
				wake = renewAt
			}
			t := k.NewTimer(min(wake.Sub(now), maxSleep))
			select {
			case <-l.stop:
				t.Stop()
				return
			case <-l.done:
				t.Stop()
				return
			case <-boundDone:
				t.Stop()
			case <-t.C():
			}
			continue // re-check the deadline on both clocks before renewing
		}
		// The attempt is abandoned at the local deadline (an unknown outcome
		// counts as lost), when the session ends, or when Release stops the
		// keepalive. The timeout is measured in real time; with the real
		// clock that is the deadline.
		ctx, cancel := context.WithTimeout(context.Background(), max(deadline.Sub(k.Now()), time.Millisecond))
		go func() {
			select {
			case <-l.stop:
				cancel()
			case <-boundDone:
				cancel()
			case <-ctx.Done():
			}
		}()
		start := k.Now()
		err := l.renewOnce(ctx)
		cancel()
		switch {
		case err == nil:
			renewAt = start.Add(l.TTL() / 3)
			retry.Reset()
		case errors.Is(err, ErrLost):
			return
		default:
			renewAt = k.Now().Add(retry.Next())
		}
	}
}
