package leasehold

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/internal/backoff"
	"github.com/leasehold/leasehold/internal/check"
	"github.com/leasehold/leasehold/internal/mutation"
	"github.com/leasehold/leasehold/internal/randid"
)

// Client takes leases from a Store on behalf of one owner. It is safe for
// concurrent use; make one per owner identity.
type Client struct {
	store Store
	owner string
	clock clock.Clock
	rho   float64
	eps   time.Duration

	backoffMin, backoffMax time.Duration
}

// Option configures a Client.
type Option func(*Client) error

// WithOwner sets the owner identity written on every grant. Default:
// "HOSTNAME/PID/RANDOM", unique per Client.
func WithOwner(owner string) Option {
	return func(c *Client) error {
		if err := asInvalid(check.Owner(owner)); err != nil {
			return err
		}
		c.owner = owner
		return nil
	}
}

// WithClock sets the clock used for local deadlines, keepalive and waiting.
// Default: clock.Real(). A store that bounds its leases by a session
// (BoundedStore) must keep that session's deadline on the same clock
// (package remote: SessionClock).
func WithClock(k clock.Clock) Option {
	return func(c *Client) error {
		if k == nil {
			return invalid("clock", "must not be nil")
		}
		c.clock = k
		return nil
	}
}

// Defaults of WithDrift.
const (
	DefaultDriftRate   = 0.01
	DefaultDriftMargin = 5 * time.Millisecond
)

// RenewalWindow is how long a lease with this TTL, renewed every TTL/3 by
// its keepalive with the default drift settings, has between sending a
// renewal and its local deadline: TTL*(1-rho) - eps - TTL/3. A supervisor
// that acts "grace before the deadline" needs grace below this.
func RenewalWindow(ttl time.Duration) time.Duration {
	return ttl - time.Duration(float64(ttl)*DefaultDriftRate) - DefaultDriftMargin - ttl/3
}

// WithDrift sets the clock-rate error rho (default 0.01, i.e. 1 %) and the
// fixed margin eps (default 5ms) taken off every local deadline: a holder
// believes it holds a lease until t0 + TTL*(1-rho) - eps, where t0 is the
// moment before the acquire or renew request was sent.
func WithDrift(rho float64, eps time.Duration) Option {
	return func(c *Client) error {
		if rho < 0 || rho >= 0.5 {
			return invalid("drift rate", "%v must be in [0, 0.5)", rho)
		}
		if eps < 0 || eps > time.Minute {
			return invalid("drift margin", "%s must be in [0, 1m]", eps)
		}
		c.rho, c.eps = rho, eps
		return nil
	}
}

// WithBackoff sets the bounds of the jittered exponential backoff that
// Acquire uses between attempts on stores without push notification and
// after transient errors. Defaults: 2ms and 250ms.
func WithBackoff(min, max time.Duration) Option {
	return func(c *Client) error {
		if min <= 0 || max < min {
			return invalid("backoff", "need 0 < min (%s) <= max (%s)", min, max)
		}
		c.backoffMin, c.backoffMax = min, max
		return nil
	}
}

// New returns a Client for store. Bad options are rejected with an error.
func New(store Store, opts ...Option) (*Client, error) {
	if store == nil {
		return nil, invalid("store", "must not be nil")
	}
	c := &Client{
		store: store, clock: clock.Real(), rho: DefaultDriftRate, eps: DefaultDriftMargin,
		backoffMin: 2 * time.Millisecond, backoffMax: 250 * time.Millisecond,
	}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	if c.owner == "" {
		host, _ := os.Hostname()
		if host == "" {
			host = "unknown"
		}
		c.owner = fmt.Sprintf("%s/%d/%s", host, os.Getpid(), randid.Hex(4))
		if check.Owner(c.owner) != nil {
			c.owner = fmt.Sprintf("pid-%d/%s", os.Getpid(), randid.Hex(4))
		}
	}
	return c, nil
}

// Owner returns the client's owner identity.
func (c *Client) Owner() string { return c.owner }

// Store returns the client's store.
func (c *Client) Store() Store { return c.store }

// DefaultTTL is the TTL of a lease when no TTL option is given.
const DefaultTTL = 15 * time.Second

// AcquireOption configures one acquire.
type AcquireOption func(*acquireConfig)

type acquireConfig struct {
	ttl       time.Duration
	data      []byte
	requestID string
	onWait    func(*HeldError)
	onError   func(error)
	keepalive bool
}

// TTL sets the lease's time to live. Default: DefaultTTL. It must lie in
// [MinTTL, MaxTTL].
func TTL(d time.Duration) AcquireOption { return func(a *acquireConfig) { a.ttl = d } }

// Data attaches data (at most MaxDataLen bytes) to the grant.
func Data(b []byte) AcquireOption { return func(a *acquireConfig) { a.data = b } }

// RequestID sets the acquire's request id. Default: a fresh random id per
// TryAcquire or Acquire call; Acquire reuses it for all its attempts, so a
// reply lost in transit never makes it wait behind itself. Pass your own to
// make retries across calls or processes idempotent. Use one id for one
// caller's attempts only: two Leases with the same owner and request id are
// one grant, and releasing either ends it for both (docs/safety.md).
func RequestID(id string) AcquireOption { return func(a *acquireConfig) { a.requestID = id } }

// OnWait is called by Acquire each time it finds the lease held, before it
// waits, with the holder's details. It must not block.
func OnWait(f func(*HeldError)) AcquireOption { return func(a *acquireConfig) { a.onWait = f } }

// OnError is called by Acquire with each transient store error (one that
// is neither ErrHeld nor ErrInvalid) before it retries. It must not block.
// Acquire keeps retrying until ctx ends; cancel ctx from here to give up.
func OnError(f func(error)) AcquireOption { return func(a *acquireConfig) { a.onError = f } }

// NoKeepalive turns automatic renewal off: the lease expires after its TTL
// unless the caller calls Renew. Done still closes at the local deadline.
func NoKeepalive() AcquireOption { return func(a *acquireConfig) { a.keepalive = false } }

func (c *Client) config(name string, opts []AcquireOption) (AcquireRequest, acquireConfig, error) {
	cfg := acquireConfig{ttl: DefaultTTL, keepalive: true}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.requestID == "" {
		cfg.requestID = randid.Hex(12)
	}
	req := AcquireRequest{Name: name, Owner: c.owner, RequestID: cfg.requestID, TTL: cfg.ttl, Data: cfg.data}
	if err := req.Validate(); err != nil {
		return req, cfg, err
	}
	if c.margin(cfg.ttl) >= cfg.ttl {
		return req, cfg, invalid("ttl", "%s leaves no time after the drift margin (rho %v, eps %s)", cfg.ttl, c.rho, c.eps)
	}
	return req, cfg, nil
}

// margin is what a local deadline takes off the TTL.
func (c *Client) margin(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*c.rho) + c.eps
}

// TryAcquire makes one attempt to take the named lease. If someone else
// holds it, it returns a *HeldError (errors.Is(err, ErrHeld)) with the
// holder's details. Any other error leaves it unknown whether the store
// granted the lease; such a grant expires after its TTL, or a retry with
// the same RequestID gets it back.
func (c *Client) TryAcquire(ctx context.Context, name string, opts ...AcquireOption) (*Lease, error) {
	req, cfg, err := c.config(name, opts)
	if err != nil {
		return nil, err
	}
	return c.try(ctx, req, cfg)
}

func (c *Client) try(ctx context.Context, req AcquireRequest, cfg acquireConfig) (*Lease, error) {
	t0, b0 := c.clock.Now(), c.clock.Boot()
	rec, err := c.store.TryAcquire(ctx, req)
	if mutation.On("deadline-from-reply") {
		t0, b0 = c.clock.Now(), c.clock.Boot()
	}
	if err != nil {
		return nil, err
	}
	return c.newLease(rec, req.RequestID, t0, b0, cfg.keepalive), nil
}

// Acquire takes the named lease, waiting until it is free or ctx ends. It
// waits on the store's push notification where the store has one
// (Watcher), and otherwise polls with jittered, capped exponential backoff;
// it never sleeps past the holder's expiry. Transient store errors are
// retried with the same request id.
//
// If ctx ends it returns ctx's error. An attempt in flight at that moment
// may have been granted; Acquire then releases it if it can tell, and
// otherwise the grant expires after its TTL.
func (c *Client) Acquire(ctx context.Context, name string, opts ...AcquireOption) (*Lease, error) {
	req, cfg, err := c.config(name, opts)
	if err != nil {
		return nil, err
	}
	if q, ok := c.store.(Queuer); ok {
		return c.acquireQueued(ctx, q, req, cfg)
	}
	var notify <-chan struct{}
	if w, ok := c.store.(Watcher); ok {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		if ch, err := w.Watch(wctx, name); err == nil {
			notify = ch
		}
	}
	bo := backoff.New(c.backoffMin, c.backoffMax)
	for {
		l, err := c.try(ctx, req, cfg)
		if err == nil {
			return keepUnlessDone(ctx, l)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var held *HeldError
		errors.As(err, &held)
		if err := c.pause(ctx, cfg, bo, notify, held, err); err != nil {
			return nil, err
		}
	}
}

// pause waits before the next attempt of an acquire loop. After a busy
// answer (held, the holder whose grant expires first) it waits until that
// grant expires or notify (the store's push, nil if none) says something
// was released; without a push, at most a backoff step. After another
// error it tells onError and waits a backoff step: a transient error, the
// next attempt retries with the same request id. An invalid argument or a
// closed store ends the loop: pause returns err, or ctx's error.
func (c *Client) pause(ctx context.Context, cfg acquireConfig, bo *backoff.Backoff, notify <-chan struct{}, held *HeldError, err error) error {
	var wait time.Duration
	switch {
	case held != nil:
		if cfg.onWait != nil {
			cfg.onWait(held)
		}
		wait = held.Remaining + time.Millisecond
		if notify == nil {
			wait = min(bo.Next(), wait)
		}
	case errors.Is(err, ErrInvalid), errors.Is(err, ErrClosed):
		return err
	default:
		if cfg.onError != nil {
			cfg.onError(err)
		}
		wait = bo.Next()
	}
	t := c.clock.NewTimer(max(wait, 0))
	select {
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	case <-notify:
		t.Stop()
	case <-t.C():
	}
	return nil
}

// Do takes the named lease (waiting as Acquire does), runs fn with a context
// that is cancelled when the lease is lost or ctx ends, and releases the
// lease when fn returns. It returns fn's error; if the lease was lost while
// fn ran and fn returned nil, it returns an error matching ErrLost.
//
// Do does not fence fn's writes by itself: pass the lease's token (from
// LeaseFromContext) to the resource you write so it can reject stale writers.
func (c *Client) Do(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...AcquireOption) error {
	l, err := c.Acquire(ctx, name, opts...)
	if err != nil {
		return err
	}
	lctx, cancel := l.Context(ctx)
	defer cancel()
	ferr := fn(withLease(lctx, l))
	lostErr := l.Err()
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer rcancel()
	relErr := l.Release(rctx)
	switch {
	case ferr != nil:
		return ferr
	case errors.Is(lostErr, ErrLost):
		return lostErr
	case relErr != nil && !errors.Is(relErr, ErrLost):
		return fmt.Errorf("release %q: %w", name, relErr)
	}
	return nil
}

type leaseKey struct{}

func withLease(ctx context.Context, l *Lease) context.Context {
	return context.WithValue(ctx, leaseKey{}, l)
}

// LeaseFromContext returns the lease held for the fn run by Do.
func LeaseFromContext(ctx context.Context) (*Lease, bool) {
	l, ok := ctx.Value(leaseKey{}).(*Lease)
	return l, ok
}

// acquireQueued waits in the store's own FIFO queue (Queuer). It tries
// once first so that OnWait learns who holds the lease.
func (c *Client) acquireQueued(ctx context.Context, q Queuer, req AcquireRequest, cfg acquireConfig) (*Lease, error) {
	l, err := c.try(ctx, req, cfg)
	if err == nil {
		return l, nil
	}
	var held *HeldError
	if errors.As(err, &held) && cfg.onWait != nil {
		cfg.onWait(held)
	}
	bo := backoff.New(c.backoffMin, c.backoffMax)
	// waitFailed: the latest AcquireWait ended with an error of its own,
	// not ctx's, so an entry of this request may be left in the store's
	// queue (a lost connection). Giving up then asks the store to remove
	// it (AcquireWait with the ended ctx), so no later release hands the
	// lease to a caller that has gone.
	waitFailed := false
	giveUp := func() (*Lease, error) {
		if waitFailed {
			_, _ = q.AcquireWait(ctx, req)
		}
		return nil, ctx.Err()
	}
	for {
		if ctx.Err() != nil {
			return giveUp()
		}
		if err != nil && !errors.As(err, &held) {
			if errors.Is(err, ErrInvalid) || errors.Is(err, ErrClosed) {
				return nil, err
			}
			if cfg.onError != nil {
				cfg.onError(err)
			}
			t := c.clock.NewTimer(bo.Next())
			select {
			case <-ctx.Done():
				t.Stop()
				return giveUp()
			case <-t.C():
			}
		}
		t0, b0 := c.clock.Now(), c.clock.Boot()
		var rec Record
		rec, err = q.AcquireWait(ctx, req)
		if err != nil {
			waitFailed = ctx.Err() == nil || !errors.Is(err, ctx.Err())
			continue
		}
		waitFailed = false
		if c.clock.Now().Sub(t0) > req.TTL/3 {
			// The grant happened at some moment during a long wait: its
			// expiry is only known to be after t0 + TTL. Renew to know
			// it afresh.
			t0, b0 = c.clock.Now(), c.clock.Boot()
			if err = c.store.Renew(ctx, req.Name, req.Owner, rec.Token, req.TTL); err != nil {
				if !errors.Is(err, ErrNotHeld) {
					rctx, cancel := context.WithTimeout(context.Background(), time.Second)
					_ = c.store.Release(rctx, req.Name, req.Owner, rec.Token)
					cancel()
				}
				continue
			}
		}
		return keepUnlessDone(ctx, c.newLease(rec, req.RequestID, t0, b0, cfg.keepalive))
	}
}

// keepUnlessDone returns l, or, if ctx ended while l was being granted
// (the caller has given up on it), releases l and returns ctx's error.
func keepUnlessDone(ctx context.Context, l *Lease) (*Lease, error) {
	if ctx.Err() != nil {
		rctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = l.Release(rctx)
		cancel()
		return nil, ctx.Err()
	}
	return l, nil
}
