package postgres

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/backoff"
	"github.com/leasehold/leasehold/internal/watchset"
	"github.com/leasehold/leasehold/storekit"
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
	h.stop, h.done = make(chan struct{}), make(chan struct{})
}

// Watch implements leasehold.Watcher. The channel receives (without
// blocking the store) when the named lease is released, by any process
// using the same table, and also after the listener (re)connects, since a
// release may have been missed while it was not listening. Expiry sends
// nothing: waiters wake at the holder's remaining time instead. The channel
// is closed after ctx ends.
func (s *Store) Watch(ctx context.Context, name string) (<-chan struct{}, error) {
	if err := storekit.ValidateName(name); err != nil {
		return nil, err
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
	if !h.running {
		h.running = true
		go h.run()
	}
	return ch, nil
}

func (h *hub) notify(name string) { h.set.Notify(name) }

func (h *hub) notifyAll() { h.set.NotifyAll() }

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
	h.listens++
	h.mu.Unlock()
	h.notifyAll()
	for {
		wctx, cancel := context.WithTimeout(ctx, listenIdle)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			h.notify(n.Payload)
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
