package postgres

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/backoff"
	"github.com/leasehold/leasehold/storekit"
	"github.com/leasehold/leasehold/storekit/watchset"
)

// Listener timing. The listener reconnects with jittered exponential
// backoff between listenBackoffMin and listenBackoffMax; a connection that
// has been silent for listenIdle is pinged (with listenPingTimeout) so that
// a peer that vanished without closing the socket is noticed.
const (
	listenBackoffMin  = 50 * time.Millisecond
	listenBackoffMax  = 5 * time.Second
	listenIdle        = 15 * time.Second
	listenPingTimeout = 5 * time.Second
	listenDialTimeout = 10 * time.Second
)

// hub delivers Watch notifications. Its listener goroutine starts on the
// first Watch and runs until Close, which stops it and waits for it. It
// holds one connection of its own (not from the pool) with LISTEN on the
// table's channel; each notification carries a released name.
type hub struct {
	connCfg *pgx.ConnConfig
	before  func(context.Context, *pgx.ConnConfig) error // the pool's BeforeConnect
	after   func(context.Context, *pgx.Conn) error       // the pool's AfterConnect
	channel string

	set watchset.Set // the watchers

	// Queue (queue.go): the waiters of this Store's AcquireWait calls, by
	// waiter id, each receiving the payload of the notification addressed
	// to it ("" after a reconnection: a grant may have been missed); and
	// the Watch interests, refreshed every window/3 by refresh.
	waiters sync.Map // string → chan string (buffered 1)
	refresh func(ctx context.Context, names []string) error
	window  time.Duration
	ready   chan struct{} // closed once the first LISTEN is established
	gaveUp  atomic.Bool   // a waiter waited for ready in vain: later ones do not

	mu      sync.Mutex
	running bool
	closed  bool
	stop    chan struct{} // closed by close
	done    chan struct{} // closed when the listener goroutine returns
	listens int           // LISTENs established so far (for tests)
}

// init takes the pool's connection settings, including its connect hooks
// (which may, for example, fetch a fresh password), for the listener's own
// connection.
func (h *hub) init(cfg *pgxpool.Config, channel string) {
	h.connCfg, h.before, h.after, h.channel = cfg.ConnConfig, cfg.BeforeConnect, cfg.AfterConnect, channel
	h.stop, h.done, h.ready = make(chan struct{}), make(chan struct{}), make(chan struct{})
}

// Watch implements leasehold.Watcher. The channel receives (without
// blocking the store) when the named lease is released, by any process
// using the same table, and also after the listener (re)connects, since a
// release may have been missed while it was not listening. Expiry sends
// nothing: waiters wake at the holder's remaining time instead. The channel
// is closed after ctx ends.
//
// Releases notify a name only while some Store watches it: Watch first
// records this Store's interest in the name in the queue table (one round
// trip; a watch row with a deadline of the waiter window, which the
// listener goroutine refreshes every third of it while the name is
// watched here, and which lapses by itself when it no longer is).
func (s *Store) Watch(ctx context.Context, name string) (<-chan struct{}, error) {
	if err := storekit.ValidateName(name); err != nil {
		return nil, err
	}
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	if err := s.watch.refresh(ctx, []string{name}); err != nil {
		return nil, s.fail(ctx, err)
	}
	h := &s.watch
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || s.closed.Load() {
		return nil, leasehold.ErrClosed
	}
	ch, err := h.set.Add(ctx, name)
	if err != nil {
		return nil, err
	}
	h.start()
	return ch, nil
}

// start starts the listener goroutine unless it runs. h.mu held.
func (h *hub) start() {
	if !h.running {
		h.running = true
		go h.run()
	}
}

// await registers waiter id for the notification addressed to it, starts
// the listener, and waits (at most until ctx ends or maxWait passes) for
// it to listen. The returned function unregisters the waiter.
func (h *hub) await(ctx context.Context, id string, maxWait time.Duration) (<-chan string, func(), error) {
	ch := make(chan string, 1)
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, nil, leasehold.ErrClosed
	}
	h.waiters.Store(id, ch)
	h.start()
	h.mu.Unlock()
	done := func() { h.waiters.Delete(id) }
	if h.gaveUp.Load() {
		return ch, done, nil // not listening (yet): do not wait each time
	}
	t := time.NewTimer(maxWait)
	defer t.Stop()
	select {
	case <-h.ready:
	case <-t.C:
		h.gaveUp.Store(true)
	case <-h.stop:
	case <-ctx.Done():
	}
	return ch, done, nil
}

// dispatch delivers a notification: to one waiter when it is addressed to
// one (waiterPrefix, waiter id, space, the rest), else to the watchers of
// the name it carries.
func (h *hub) dispatch(payload string) {
	rest, ok := strings.CutPrefix(payload, waiterPrefix)
	if !ok {
		h.notify(payload)
		return
	}
	id, _, _ := strings.Cut(rest, " ")
	if v, ok := h.waiters.Load(id); ok {
		select {
		case v.(chan string) <- rest:
		default:
		}
	}
}

func (h *hub) notify(name string) { h.set.Notify(name) }

// wakeWaiters wakes every waiter, to call the wait function again.
func (h *hub) wakeWaiters() {
	h.waiters.Range(func(_, v any) bool {
		select {
		case v.(chan string) <- "":
		default:
		}
		return true
	})
}

// close stops the listener and waits for it to return.
func (h *hub) close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	running := h.running
	close(h.stop)
	h.mu.Unlock()
	if running {
		<-h.done
	}
	h.set.Close()
}

// run is the listener goroutine: connect, LISTEN, dispatch, and on any
// failure reconnect with backoff, until close.
func (h *hub) run() {
	defer close(h.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-h.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	go h.keepInterests(ctx)
	retry := backoff.New(listenBackoffMin, listenBackoffMax)
	for ctx.Err() == nil {
		if h.listen(ctx) {
			retry.Reset()
		}
		t := time.NewTimer(retry.Next())
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// listen runs one connection until it fails or ctx ends. It reports whether
// LISTEN was established. After LISTEN it wakes every watcher: a release
// may have committed while nobody listened.
func (h *hub) listen(ctx context.Context) bool {
	dctx, cancel := context.WithTimeout(ctx, listenDialTimeout)
	defer cancel()
	cfg := h.connCfg.Copy()
	if h.before != nil && h.before(dctx, cfg) != nil {
		return false
	}
	conn, err := pgx.ConnectConfig(dctx, cfg)
	if err != nil {
		return false
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn.Close(cctx)
		cancel()
	}()
	if h.after != nil && h.after(dctx, conn) != nil {
		return false
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{h.channel}.Sanitize()); err != nil {
		return false
	}
	h.mu.Lock()
	first := h.listens == 0
	if first {
		close(h.ready)
	}
	h.listens++
	h.mu.Unlock()
	h.set.NotifyAll()
	if !first {
		// A grant may have been notified while nobody listened. (Before
		// the first LISTEN, waiters wait for it before their first call.)
		h.wakeWaiters()
	}
	for {
		wctx, cancel := context.WithTimeout(ctx, listenIdle)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			h.dispatch(n.Payload)
		case ctx.Err() != nil:
			return true
		case errors.Is(err, context.DeadlineExceeded) && !conn.IsClosed():
			pctx, cancel := context.WithTimeout(ctx, listenPingTimeout)
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				return true
			}
		default:
			return true
		}
	}
}

// keepInterests refreshes the watch rows of the names watched here every
// third of the waiter window, until ctx ends. A failed refresh is retried
// at the next tick; a name whose row lapsed meanwhile is not notified by
// releases until then (its watchers still wake at the holder's expiry).
func (h *hub) keepInterests(ctx context.Context) {
	t := time.NewTicker(h.window / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if names := h.set.Names(); len(names) > 0 {
			rctx, cancel := context.WithTimeout(ctx, h.window/3)
			_ = h.refresh(rctx, names)
			cancel()
		}
	}
}
