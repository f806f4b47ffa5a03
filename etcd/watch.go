package etcd

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/internal/backoff"
	"github.com/leasehold/leasehold/storekit"
)

// watchReadyWait bounds how long Watch waits for etcd to confirm the watch.
const watchReadyWait = 3 * time.Second

// Watch implements leasehold.Watcher with an etcd watch on the lease key
// that reports deletions only: a release deletes the key, and so does
// etcd when it revokes an expired lease, so expiry is pushed as well
// (within about 0.5 s of it, as etcd's revocation loop runs). etcd
// multiplexes all watches of a client over one stream; each Watch costs a
// goroutine.
//
// Watch returns once etcd has confirmed the watch (or after 3 s, without
// failing, if etcd does not answer; the channel then receives a value when
// the watch is in place), so a deletion after Watch returned is never
// missed. When the watch breaks (etcd unreachable, leader lost,
// compaction) it is re-established and the channel receives a value, since
// something may have been missed. The channel is closed after ctx ends or
// the store is closed.
func (s *Store) Watch(ctx context.Context, name string) (<-chan struct{}, error) {
	if err := storekit.ValidateName(name); err != nil {
		return nil, err
	}
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	w := &watch{s: s, key: s.leaseKey(name), ch: make(chan struct{}, 1), ready: make(chan struct{})}
	wctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.stop, cancel)
	go func() {
		defer stop()
		defer cancel()
		w.run(wctx)
	}()
	t := time.NewTimer(watchReadyWait)
	defer t.Stop()
	select {
	case <-w.ready:
	case <-ctx.Done():
	case <-t.C:
		w.mu.Lock()
		w.late = !w.created
		w.mu.Unlock()
	}
	return w.ch, nil
}

type watch struct {
	s     *Store
	key   string
	ch    chan struct{}
	ready chan struct{} // closed when etcd first confirms the watch

	mu      sync.Mutex
	created bool
	late    bool // Watch returned before the watch was confirmed
}

func (w *watch) ping() {
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

func (w *watch) run(ctx context.Context) {
	defer close(w.ch)
	var rev int64 // revision to resume from; 0 = the current one
	retry := backoff.New(50*time.Millisecond, 2*time.Second)
	for ctx.Err() == nil {
		opts := []clientv3.OpOption{clientv3.WithFilterPut(), clientv3.WithCreatedNotify()}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for resp := range w.s.cli.Watch(wctx, w.key, opts...) {
			if resp.Created {
				w.confirmed()
				retry.Reset()
			}
			if resp.CompactRevision != 0 {
				rev = 0
				w.ping()
			}
			if resp.Err() != nil || resp.Canceled {
				break
			}
			if len(resp.Events) > 0 {
				w.ping()
			}
			if r := resp.Header.GetRevision(); r > 0 && resp.CompactRevision == 0 {
				rev = r + 1
			}
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		w.ping() // the watch broke; something may have been missed
		if backoff.Sleep(ctx, retry.Next()) != nil {
			return
		}
	}
}

// confirmed notes that etcd confirmed the watch.
func (w *watch) confirmed() {
	w.mu.Lock()
	first, late := !w.created, w.late
	w.created = true
	w.mu.Unlock()
	if first {
		close(w.ready)
	}
	if !first || late {
		w.ping()
	}
}
