package leasehold

import (
	"context"
	"errors"
	"time"
)

// ErrNoLeader reports that an election has no live leader.
var ErrNoLeader = errors.New("no leader")

// Leader describes an election's current leader.
type Leader struct {
	Identity string        // the leader's owner identity
	Term     uint64        // the leader's fencing token: strictly increasing per election
	Data     []byte        // data the leader attached when it campaigned
	Since    time.Time     // wall-clock time of the grant (display only)
	Expires  time.Duration // time left on its lease, by the store's clock
}

// Election is leader election on one name: the leader is the holder of the
// name's lease and its term is the lease's fencing token, so terms strictly
// increase and a term has at most one leader. A standby waiting in Campaign
// takes over at once when the leader resigns, and within the lease's TTL
// (plus one wake-up) when the leader dies.
//
// Leadership does not fence writes by itself: pass Term to the resources
// the leader writes so that they reject an older term.
type Election struct {
	c    *Client
	name string
	opts []AcquireOption
}

// Election returns the election on name. opts (TTL, Data) apply to every
// campaign.
func (c *Client) Election(name string, opts ...AcquireOption) (*Election, error) {
	if _, _, err := c.config(name, opts); err != nil {
		return nil, err
	}
	return &Election{c: c, name: name, opts: opts}, nil
}

// Name returns the election's name.
func (e *Election) Name() string { return e.name }

// Campaign blocks until this client is the leader or ctx ends. It returns
// the leader's lease: its Token is the term, Done closes when leadership is
// lost, and Release resigns.
func (e *Election) Campaign(ctx context.Context) (*Lease, error) {
	return e.c.Acquire(ctx, e.name, e.opts...)
}

// Leader returns the current leader, or ErrNoLeader.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	rec, err := e.c.store.Get(ctx, e.name)
	if errors.Is(err, ErrNotFound) {
		return Leader{}, ErrNoLeader
	}
	if err != nil {
		return Leader{}, err
	}
	return Leader{Identity: rec.Owner, Term: rec.Token, Data: rec.Data, Since: rec.Acquired, Expires: rec.Remaining}, nil
}

// Observe returns a channel that receives the leader each time it changes
// (a new term, or no leader: a zero Leader) until ctx ends, when it is
// closed. It reads the leader at once, then on every push notification of
// the store, at the leader's expiry, and at least every interval (default
// one second when interval <= 0). The channel holds the latest change only:
// a slow reader skips intermediate leaders, never the current one.
func (e *Election) Observe(ctx context.Context, interval time.Duration) <-chan Leader {
	if interval <= 0 {
		interval = time.Second
	}
	out := make(chan Leader, 1)
	var notify <-chan struct{}
	if w, ok := e.c.store.(Watcher); ok {
		if ch, err := w.Watch(ctx, e.name); err == nil {
			notify = ch
		}
	}
	go func() {
		defer close(out)
		var last Leader
		first := true
		for {
			cur, err := e.Leader(ctx)
			if err == nil || errors.Is(err, ErrNoLeader) {
				if first || cur.Term != last.Term || cur.Identity != last.Identity {
					first = false
					last = cur
					select { // keep only the latest
					case <-out:
					default:
					}
					out <- cur
				}
			}
			wait := interval
			if cur.Term != 0 && cur.Expires+time.Millisecond < wait {
				wait = cur.Expires + time.Millisecond
			}
			t := e.c.clock.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-notify:
				t.Stop()
			case <-t.C():
			}
		}
	}()
	return out
}

// Callbacks are the hooks of Run, in the style of Kubernetes' leader
// election. Any may be nil.
type Callbacks struct {
	// OnStartedLeading runs in its own goroutine when this client becomes
	// leader; ctx is cancelled (with cause ErrLost or ErrReleased) when
	// leadership ends. Run waits for it to return before campaigning again.
	OnStartedLeading func(ctx context.Context, lease *Lease)
	// OnStoppedLeading is called when leadership ends, with why: an error
	// matching ErrLost, or ctx's error when Run was stopped. It runs before
	// Run resigns, so after a graceful stop no other candidate leads until
	// it has returned.
	OnStoppedLeading func(why error)
	// OnNewLeader is called when an observed leader (this client or
	// another) is new.
	OnNewLeader func(Leader)
}

// Run campaigns, leads until leadership is lost or ctx ends, and campaigns
// again, until ctx ends. When ctx ends while leading, it cancels the
// leader's context, waits for OnStartedLeading to return and resigns. It
// returns ctx's error, or a store error that made campaigning impossible.
func (e *Election) Run(ctx context.Context, cb Callbacks) error {
	if cb.OnNewLeader != nil {
		octx, cancel := context.WithCancel(ctx)
		defer cancel()
		obs := e.Observe(octx, 0)
		go func() {
			for l := range obs {
				if l.Term != 0 {
					cb.OnNewLeader(l)
				}
			}
		}()
	}
	for {
		lease, err := e.Campaign(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		lctx, cancel := lease.Context(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if cb.OnStartedLeading != nil {
				cb.OnStartedLeading(lctx, lease)
			} else {
				<-lctx.Done()
			}
		}()
		select {
		case <-lease.Done():
		case <-ctx.Done():
		}
		cancel()
		<-done
		// Tell the caller before resigning, so that nobody else leads
		// before OnStoppedLeading has returned (unless the lease was lost).
		why := lease.Err()
		if why == nil {
			why = ctx.Err()
		}
		if cb.OnStoppedLeading != nil {
			cb.OnStoppedLeading(why)
		}
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = lease.Release(rctx)
		rcancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}
