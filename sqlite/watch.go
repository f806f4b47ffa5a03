package sqlite

import (
	"context"
	"database/sql"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storekit"
	"github.com/leasehold/leasehold/storekit/watchset"
)

// pollInterval is how often the watch goroutine asks SQLite whether another
// connection (in this process or another) committed. It runs only while
// someone watches, and reads a counter from the shared WAL index: no disk
// I/O and no write.
const pollInterval = 2 * time.Millisecond

// watchHub delivers Watch notifications: at once for releases made through
// this Store, and within pollInterval for releases and expiries made by
// other processes sharing the file (PRAGMA data_version changes, then the
// watched names are re-read and the free ones notified).
type watchHub struct {
	s   *Store
	set watchset.Set

	mu      sync.Mutex // guards the poll goroutine's state
	running bool
	stop    chan struct{}
	stopped chan struct{}
	closed  bool
}

func (h *watchHub) init(s *Store) { h.s = s }

// Watch implements leasehold.Watcher.
func (s *Store) Watch(ctx context.Context, name string) (<-chan struct{}, error) {
	if err := storekit.ValidateName(name); err != nil {
		return nil, err
	}
	if s.ro != nil {
		return nil, &ReadOnlyError{Path: s.path}
	}
	h := &s.watch
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, leasehold.ErrClosed
	}
	ch, err := h.set.Add(ctx, name)
	if err != nil {
		return nil, err
	}
	if !h.running {
		h.running = true
		h.stop, h.stopped = make(chan struct{}), make(chan struct{})
		go h.poll(h.stop, h.stopped)
	}
	return ch, nil
}

func (h *watchHub) notify(name string) { h.set.Notify(name) }

// poll runs while there are watchers. It holds one connection of its own,
// since data_version is per connection.
func (h *watchHub) poll(stop, stopped chan struct{}) {
	defer close(stopped)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	conn, err := h.s.db.Conn(ctx)
	if err != nil {
		h.mu.Lock()
		h.running = false
		h.mu.Unlock()
		return
	}
	defer conn.Close()
	var last int64 = -1
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		names := h.set.Names()
		if len(names) == 0 {
			h.mu.Lock()
			if h.set.Len() == 0 {
				h.running = false
				h.mu.Unlock()
				return
			}
			h.mu.Unlock()
			continue
		}
		var v int64
		if err := conn.QueryRowContext(ctx, "PRAGMA data_version").Scan(&v); err != nil {
			continue
		}
		if v == last {
			continue
		}
		last = v
		h.notifyFree(ctx, conn, names)
	}
}

// notifyFree notifies the watched names that are not live.
func (h *watchHub) notifyFree(ctx context.Context, conn *sql.Conn, names []string) {
	now := h.s.now()
	for _, n := range names {
		r, err := h.s.load(ctx, conn, n)
		if err != nil {
			return
		}
		if !r.Live(now) {
			h.notify(n)
		}
	}
}

func (h *watchHub) close() {
	h.mu.Lock()
	h.closed = true
	running, stop, stopped := h.running, h.stop, h.stopped
	h.running = false
	h.mu.Unlock()
	if running {
		close(stop)
		<-stopped
	}
	h.set.Close()
}
