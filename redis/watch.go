package redis

import (
	"context"
	"errors"
	"net"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storekit"
)

// subscribeWait bounds how long Watch waits for the first subscription to
// be confirmed. A waiter whose Watch fails polls instead.
const subscribeWait = 10 * time.Second

// interestTTL is how long a Watch's interest marker (<lease key>:i) lives
// unless refreshed; a Watch refreshes it every third of that while its
// context lasts. A release publishes the name only while such a marker
// exists, so an uncontended release publishes nothing.
const interestTTL = 10 * time.Second

// Watch implements leasehold.Watcher. The store has one pub/sub
// subscription on its release channel (<prefix>released), started by the
// first Watch (or AcquireWait) and stopped by Close. Watch also sets the
// name's interest marker (<lease key>:i, with an expiry of 10s) and
// refreshes it while ctx lasts; release.lua publishes the name on the
// channel only while that marker exists and no queued waiter takes the
// lease over. The channel receives when the named lease is released
// (nobody queued), and also whenever the subscription is re-established
// after a lost connection (a release may have been missed meanwhile).
// Expiry sends nothing; waiters wake at the holder's remaining time. The
// channel is closed after ctx ends.
//
// Watch returns once the subscription is confirmed and the marker set, so
// a release after Watch returns is not missed while the connection lasts.
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
	ch, err := w.set.Add(wctx, name)
	w.mu.Unlock()
	if err != nil {
		abort()
		return nil, err
	}
	if err := s.subscribed(ctx); err != nil {
		abort()
		return nil, err
	}
	interest := s.nameKeys(name)[4]
	s.addInterest(interest)
	context.AfterFunc(wctx, func() { s.dropInterest(interest) })
	if err := s.rdb.Set(ctx, interest, "1", interestTTL).Err(); err != nil {
		abort()
		return nil, s.translate(ctx, "watch", err)
	}
	context.AfterFunc(ctx, abort) // wctx lives as long as ctx
	go s.keepInterest(wctx, interest)
	return ch, nil
}

// keepInterest refreshes a Watch's interest marker until ctx ends. A
// failed refresh is retried at the next tick; meanwhile the watcher still
// wakes at the holder's remaining time.
func (s *Store) keepInterest(ctx context.Context, key string) {
	t := time.NewTicker(interestTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = s.rdb.Set(ctx, key, "1", interestTTL).Err()
		}
	}
}

// addInterest and dropInterest count the live Watches of an interest
// marker, so that the subscriber can set the markers again when its
// subscription comes back (a restart of Redis may have lost them).
func (s *Store) addInterest(key string) {
	s.w.wmu.Lock()
	defer s.w.wmu.Unlock()
	if s.w.interest == nil {
		s.w.interest = map[string]int{}
	}
	s.w.interest[key]++
}

func (s *Store) dropInterest(key string) {
	s.w.wmu.Lock()
	defer s.w.wmu.Unlock()
	if s.w.interest[key]--; s.w.interest[key] <= 0 {
		delete(s.w.interest, key)
	}
}

// restoreInterest sets the interest marker of every live Watch again (best
// effort, bounded by 2s): the subscription came back, and Redis may have
// restarted without its data, so that releases would publish nothing
// until each Watch's next refresh.
func (s *Store) restoreInterest() {
	s.w.wmu.Lock()
	keys := make([]string, 0, len(s.w.interest))
	for k := range s.w.interest {
		keys = append(keys, k)
	}
	s.w.wmu.Unlock()
	if len(keys) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	// One key per command: on a cluster the markers are in many slots.
	_, _ = s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for _, k := range keys {
			p.Set(ctx, k, "1", interestTTL)
		}
		return nil
	})
}

// subscribed starts the subscriber if needed and returns once its first
// subscription is confirmed.
func (s *Store) subscribed(ctx context.Context) error {
	w := &s.w
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return leasehold.ErrClosed
	}
	if !w.started {
		s.startSubscriber()
	}
	ready, done := w.ready, w.done
	w.mu.Unlock()
	select {
	case <-ready:
		return nil
	default:
	}
	t := time.NewTimer(subscribeWait)
	defer t.Stop()
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return errors.New("redis watch: subscription not confirmed in time")
	case <-done:
		return leasehold.ErrClosed
	}
}

// pingEvery is how long the subscriber waits for a message before it
// pings the server, so that a connection that died silently is noticed
// (the ping fails and go-redis reconnects and resubscribes).
const pingEvery = 5 * time.Second

// startSubscriber starts the subscriber goroutine; w.mu is held. It reads
// the subscription's connection itself (not through go-redis's message
// channel, whose forwarding goroutine would add a hand-off to every grant
// message); go-redis reconnects and resubscribes by itself when a read
// fails, and each (re)subscription arrives as a *Subscription.
//
// The goroutine subscribes, not the caller: subscribing dials a
// connection of its own and waits for its handshake's replies, which held
// the first waiter past its context's end, and every other waiter of the
// store behind w.mu, when the replies came late (twice the delay:
// TestAcquireWaitLateRepliesFirstWait; R17's client(redis) late row).
func (s *Store) startSubscriber() {
	w := &s.w
	w.started = true
	w.ready = make(chan struct{})
	w.done = make(chan struct{})
	go func() {
		defer close(w.done)
		ps := s.rdb.Subscribe(context.Background(), s.channel)
		w.mu.Lock()
		stopped := w.stopped
		w.ps = ps
		w.mu.Unlock()
		if stopped {
			_ = ps.Close()
			return
		}
		ctx := context.Background()
		first, failures := true, 0
		for {
			msg, err := ps.ReceiveTimeout(ctx, pingEvery)
			if err != nil {
				if s.closed.Load() || errors.Is(err, goredis.ErrClosed) {
					return
				}
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					_ = ps.Ping(ctx) // its pong, or a failure that reconnects, comes next
					continue
				}
				if failures++; failures > 1 {
					time.Sleep(100 * time.Millisecond)
				}
				continue
			}
			failures = 0
			switch m := msg.(type) {
			case *goredis.Subscription:
				if m.Kind != "subscribe" {
					continue
				}
				if first {
					// No waiter has run wait.lua before this: nothing
					// addressed to one can have been missed.
					s.w.set.NotifyAll()
					first = false
					close(w.ready)
				} else {
					// Markers first: a watcher woken here that then
					// waits for a release is told of it.
					s.restoreInterest()
					s.notify("", true)
				}
			case *goredis.Message:
				s.notify(m.Payload, false)
			}
		}
	}()
}

// notify wakes the watchers of name, or all watchers and queued waiters,
// without blocking. A payload with a NUL is addressed to one queued waiter
// (see queue.go).
func (s *Store) notify(payload string, all bool) {
	if all {
		s.w.set.NotifyAll()
		s.wakeAllWaiters()
		return
	}
	if strings.IndexByte(payload, 0) >= 0 {
		s.deliver(payload)
		return
	}
	s.w.set.Notify(payload)
}

// stopWatching closes the subscription and waits for its goroutine.
func (s *Store) stopWatching() {
	w := &s.w
	w.mu.Lock()
	w.stopped = true
	started, ps, done := w.started, w.ps, w.done
	w.mu.Unlock()
	if started {
		if ps != nil { // else the goroutine, still subscribing, closes it
			_ = ps.Close()
		}
		<-done
	}
	w.set.Close()
	s.closeWaiters()
}
