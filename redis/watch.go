package redis

import (
	"context"
	"errors"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storekit"
)

// subscribeWait bounds how long Watch waits for the first subscription to
// be confirmed. A waiter whose Watch fails polls instead.
const subscribeWait = 10 * time.Second

// Watch implements leasehold.Watcher. The store has one pub/sub
// subscription on its release channel (<prefix>released), started by the
// first Watch and stopped by Close; release.lua publishes the lease name
// there. The channel receives when the named lease is released, and also
// whenever the subscription is re-established after a lost connection (a
// release may have been missed meanwhile). Expiry sends nothing; waiters
// wake at the holder's remaining time. The channel is closed after ctx
// ends.
//
// Watch returns once the subscription is confirmed, so a release after
// Watch returns is not missed while the connection lasts.
func (s *Store) Watch(ctx context.Context, name string) (<-chan struct{}, error) {
	if err := storekit.ValidateName(name); err != nil {
		return nil, err
	}
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	// wctx ends with ctx, or when Watch fails after registering the watcher.
	wctx, abort := context.WithCancel(ctx)
	w := &s.w
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		abort()
		return nil, leasehold.ErrClosed
	}
	if !w.started {
		s.startSubscriber()
	}
	ch, err := w.set.Add(wctx, name)
	ready := w.ready
	w.mu.Unlock()
	if err != nil {
		abort()
		return nil, err
	}
	t := time.NewTimer(subscribeWait)
	defer t.Stop()
	select {
	case <-ready:
		context.AfterFunc(ctx, abort) // wctx lives as long as ctx
		return ch, nil
	case <-ctx.Done():
		abort()
		return nil, ctx.Err()
	case <-t.C:
		abort()
		return nil, errors.New("redis watch: subscription not confirmed in time")
	case <-w.done:
		abort()
		return nil, leasehold.ErrClosed
	}
}

// startSubscriber starts the subscriber goroutine; w.mu is held.
func (s *Store) startSubscriber() {
	w := &s.w
	w.started = true
	w.ready = make(chan struct{})
	w.done = make(chan struct{})
	// go-redis reconnects and resubscribes by itself, pings an idle
	// connection every few seconds, and delivers each (re)subscription as
	// a *Subscription.
	w.ps = s.rdb.Subscribe(context.Background(), s.channel)
	msgs := w.ps.ChannelWithSubscriptions(goredis.WithChannelSize(1024))
	go func() {
		defer close(w.done)
		first := true
		for m := range msgs {
			switch m := m.(type) {
			case *goredis.Subscription:
				if m.Kind != "subscribe" {
					continue
				}
				s.notify("", true)
				if first {
					first = false
					close(w.ready)
				}
			case *goredis.Message:
				s.notify(m.Payload, false)
			}
		}
	}()
}

// notify wakes the watchers of name, or all watchers, without blocking.
func (s *Store) notify(name string, all bool) {
	if all {
		s.w.set.NotifyAll()
		return
	}
	s.w.set.Notify(name)
}

// stopWatching closes the subscription and waits for its goroutine.
func (s *Store) stopWatching() {
	w := &s.w
	w.mu.Lock()
	w.stopped = true
	started, ps, done := w.started, w.ps, w.done
	w.mu.Unlock()
	if started {
		_ = ps.Close()
		<-done
	}
	w.set.Close()
}
