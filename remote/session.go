package remote

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/storekit"
)

// SessionOption configures OpenSession (of HTTPStore and RESPStore).
type SessionOption func(*sessionConfig) error

type sessionConfig struct {
	clock clock.Clock
	rho   float64
	eps   time.Duration
}

// SessionClock sets the clock the session keeps its deadline and its
// keepalive schedule on. It must be the clock of the leasehold.Client
// whose leases are taken through the session (leasehold.WithClock): a
// lease compares the session's deadline with its own. Default:
// clock.Real(), the Client's default too.
func SessionClock(k clock.Clock) SessionOption {
	return func(c *sessionConfig) error {
		if k == nil {
			return &leasehold.InvalidError{Field: "session clock", Reason: "must not be nil"}
		}
		c.clock = k
		return nil
	}
}

// SessionDrift sets the clock-rate error rho and the fixed margin eps
// taken off the session's local deadline, as leasehold.WithDrift does for
// a lease. Defaults: leasehold.DefaultDriftRate (1 %) and
// leasehold.DefaultDriftMargin (5ms).
func SessionDrift(rho float64, eps time.Duration) SessionOption {
	return func(c *sessionConfig) error {
		if rho < 0 || rho >= 0.5 {
			return &leasehold.InvalidError{Field: "session drift rate", Reason: fmt.Sprintf("%v must be in [0, 0.5)", rho)}
		}
		if eps < 0 || eps > time.Minute {
			return &leasehold.InvalidError{Field: "session drift margin", Reason: fmt.Sprintf("%s must be in [0, 1m]", eps)}
		}
		c.rho, c.eps = rho, eps
		return nil
	}
}

func sessionOptions(ttl time.Duration, opts []SessionOption) (sessionConfig, error) {
	cfg := sessionConfig{clock: clock.Real(), rho: leasehold.DefaultDriftRate, eps: leasehold.DefaultDriftMargin}
	if err := storekit.ValidateTTL(ttl); err != nil {
		return cfg, err
	}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return cfg, err
		}
	}
	if cfg.life(ttl) <= 0 {
		return cfg, &leasehold.InvalidError{Field: "ttl", Reason: fmt.Sprintf("session TTL %s leaves no time after the drift margin (rho %v, eps %s)", ttl, cfg.rho, cfg.eps)}
	}
	return cfg, nil
}

// life is how long after t0 a keepalive sent at t0 keeps the session known
// to be alive: TTL·(1−ρ) − ε.
func (c sessionConfig) life(ttl time.Duration) time.Duration {
	return ttl - time.Duration(float64(ttl)*c.rho) - c.eps
}

// keeper is the client side of a session, shared by the HTTP and RESP
// sessions: its conservative deadline on both clocks, its end, and the
// keepalive loop that moves the deadline on. It implements leasehold.Bound.
type keeper struct {
	id   string
	ttl  time.Duration
	cfg  sessionConfig
	done chan struct{}

	mu       sync.Mutex
	deadline time.Time     // monotonic
	boot     time.Duration // the same deadline on the boot-time clock
	err      error

	// onEnd, if set, is called (with mu held) when the session ends: it
	// forgets the secrets of the session's grants.
	onEnd func()

	// The keepalive loop that core.openSession runs: stop ends it, wg
	// waits for it, closing says that the session's Close stopped it.
	stop    context.CancelFunc
	wg      sync.WaitGroup
	closing atomic.Bool
}

// halt stops the keepalive loop for the session's Close and waits for it
// to return. It reports whether Close had been called before.
func (k *keeper) halt() bool {
	again := k.closing.Swap(true)
	k.stop()
	k.wg.Wait()
	return again
}

// newKeeper returns the keeper of a session opened by a request sent at
// (t0, b0).
func newKeeper(id string, ttl time.Duration, cfg sessionConfig, t0 time.Time, b0 time.Duration) *keeper {
	life := cfg.life(ttl)
	return &keeper{id: id, ttl: ttl, cfg: cfg, done: make(chan struct{}), deadline: t0.Add(life), boot: b0 + life}
}

// Deadline implements leasehold.Bound: the session is known to be alive
// until then, on the monotonic and the boot-time clock, unless a keepalive
// is confirmed. Once the session has ended it is no later than the end.
func (k *keeper) Deadline() (time.Time, time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.deadline, k.boot
}

// Done implements leasehold.Bound: it is closed when the session has ended
// (lost, or closed).
func (k *keeper) Done() <-chan struct{} { return k.done }

// Err implements leasehold.Bound: nil while the session lives, then why
// it ended.
func (k *keeper) Err() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.err
}

// pastLocked reports whether the deadline has passed on either clock.
func (k *keeper) pastLocked() bool {
	return !k.cfg.clock.Now().Before(k.deadline) || k.cfg.clock.Boot() >= k.boot
}

// end ends the session with err unless it has ended already; the deadline
// becomes no later than now. It reports whether this call ended it.
func (k *keeper) end(err error) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.endLocked(err)
}

func (k *keeper) endLocked(err error) bool {
	if k.err != nil {
		return false
	}
	now, boot := k.cfg.clock.Now(), k.cfg.clock.Boot()
	if now.Before(k.deadline) {
		k.deadline = now
	}
	k.boot = min(k.boot, boot)
	k.err = err
	close(k.done)
	if k.onEnd != nil {
		k.onEnd()
	}
	return true
}

// confirm records a keepalive sent at (t0, b0) as confirmed. A
// confirmation that comes after the deadline (or after the end) does not
// move the deadline: the session was not known to be alive for a while, and
// its leases were lost then, so it ends instead; confirm reports false.
func (k *keeper) confirm(t0 time.Time, b0 time.Duration) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.err != nil {
		return false
	}
	if k.pastLocked() {
		k.endLocked(fmt.Errorf("session %s: %w: a keepalive was confirmed only after the session's local deadline", k.id, leasehold.ErrLost))
		return false
	}
	life := k.cfg.life(k.ttl)
	if d := t0.Add(life); d.After(k.deadline) {
		k.deadline = d
	}
	k.boot = max(k.boot, b0+life)
	return true
}

// maxKeepaliveSleep bounds each wait of the keepalive loop, so that a
// client that was suspended (its monotonic clock and timers stood still)
// notices within this long after resuming that the boot-time deadline
// passed.
const maxKeepaliveSleep = time.Second

// run is the keepalive loop: every TTL/3 from the last confirmed keepalive
// it calls send, whose context ends at the session's deadline. A success
// moves the deadline on (from before the request was sent); an error for
// which gone is true (the server does not know the session, or the store
// was closed) ends the session at once; other errors are retried sooner, until the deadline
// passes, which ends the session. It returns when ctx ends or the session
// has ended.
func (k *keeper) run(ctx context.Context, t0 time.Time, send func(context.Context) error, gone func(error) bool) {
	clk := k.cfg.clock
	every := k.ttl / 3
	next := t0.Add(every)
	for {
		k.mu.Lock()
		if k.err == nil && k.pastLocked() {
			k.endLocked(fmt.Errorf("session %s: %w: no keepalive confirmed before the session's local deadline", k.id, leasehold.ErrLost))
		}
		ended, deadline := k.err != nil, k.deadline
		k.mu.Unlock()
		if ended || ctx.Err() != nil {
			return
		}
		now := clk.Now()
		if now.Before(next) {
			wait := min(next.Sub(now), deadline.Sub(now), maxKeepaliveSleep)
			t := clk.NewTimer(max(wait, 0))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-k.done:
				t.Stop()
				return
			case <-t.C():
			}
			continue // re-check the deadline on both clocks
		}
		sent, sentBoot := clk.Now(), clk.Boot()
		// The attempt is abandoned at the deadline (measured in real time,
		// which is the deadline itself with the real clock).
		rctx, cancel := context.WithTimeout(ctx, max(deadline.Sub(sent), time.Millisecond))
		err := send(rctx)
		cancel()
		switch {
		case err == nil:
			if !k.confirm(sent, sentBoot) {
				return
			}
			next = sent.Add(every)
		case gone(err):
			k.end(fmt.Errorf("session %s: %w: keepalive refused: %w", k.id, leasehold.ErrLost, err))
			return
		case ctx.Err() != nil:
			return
		default:
			next = clk.Now().Add(max(min(every/4, time.Second), time.Millisecond))
		}
	}
}
