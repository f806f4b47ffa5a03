package resp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// SubscriberOptions configure a Subscriber.
type SubscriberOptions struct {
	// Connect opens a connection ready for commands. Required.
	Connect func(ctx context.Context) (*Conn, error)
	// Subscribe and Unsubscribe append the command that starts or stops
	// the notifications for key. Required.
	Subscribe, Unsubscribe func(b []byte, key string) []byte
	// Push reports whether v is a notification rather than the reply to a
	// command, and for which key ("" = every key). Required.
	Push func(v Value) (key string, ok bool)
	// Reply checks the reply to a (un)subscribe command. Required.
	Reply func(v Value) error
	// AckTimeout bounds how long Subscribe waits for the server to confirm
	// a subscription (default 10s).
	AckTimeout time.Duration
}

// Subscriber multiplexes subscriptions to push notifications over one
// dedicated connection: each key is subscribed once however many callers
// watch it, and every caller's channel receives a value (without blocking,
// coalescing) for each notification. When the connection breaks, it
// reconnects (with capped backoff), subscribes again, and then signals every
// channel once, since notifications may have been missed meanwhile.
type Subscriber struct {
	opts SubscriberOptions
	ctx  context.Context // ends with Close
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu      sync.Mutex
	conn    *Conn // nil while not connected
	subs    map[string]*subKey
	pending []func(error) // completions of the commands sent on conn, in order
	started bool
	closed  bool
}

type subKey struct {
	chans   map[chan struct{}]struct{}
	active  bool         // confirmed on the current connection
	resync  bool         // confirmed on an earlier connection: signal when confirmed again
	waiters []chan error // Subscribe calls waiting for confirmation
}

// NewSubscriber returns a Subscriber; it connects on first Subscribe.
func NewSubscriber(opts SubscriberOptions) *Subscriber {
	if opts.AckTimeout <= 0 {
		opts.AckTimeout = 10 * time.Second
	}
	s := &Subscriber{opts: opts, subs: map[string]*subKey{}}
	s.ctx, s.stop = context.WithCancel(context.Background())
	return s
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Subscribe returns a channel that receives a value whenever a
// notification for key arrives, from the moment Subscribe returns (the
// server has confirmed the subscription) until ctx ends; the channel is
// then closed (or when the Subscriber is closed).
func (s *Subscriber) Subscribe(ctx context.Context, key string) (<-chan struct{}, error) {
	ch := make(chan struct{}, 1)
	errc := make(chan error, 1)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClientClosed
	}
	k := s.subs[key]
	if k == nil {
		k = &subKey{chans: map[chan struct{}]struct{}{}}
		s.subs[key] = k
		if s.conn != nil {
			s.send(s.conn, key, true)
		}
	}
	k.chans[ch] = struct{}{}
	if !k.active {
		k.waiters = append(k.waiters, errc)
	} else {
		errc <- nil
	}
	if !s.started {
		s.started = true
		s.wg.Add(1)
		go s.run()
	}
	s.mu.Unlock()

	t := time.NewTimer(s.opts.AckTimeout)
	defer t.Stop()
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
		err = ctx.Err()
	case <-t.C:
		err = fmt.Errorf("subscription not confirmed within %s", s.opts.AckTimeout)
	}
	if err != nil {
		s.remove(key, ch)
		return nil, err
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		select {
		case <-ctx.Done():
		case <-s.ctx.Done():
		}
		s.remove(key, ch)
	}()
	return ch, nil
}

// send writes a (un)subscribe command for key on conn. s.mu held. A write
// error is left to the reader, which sees the connection fail.
func (s *Subscriber) send(conn *Conn, key string, sub bool) {
	enc := s.opts.Unsubscribe
	if sub {
		enc = s.opts.Subscribe
	}
	s.pending = append(s.pending, func(err error) { s.confirmed(key, sub, err) })
	_ = conn.Send(func(b []byte) []byte { return enc(b, key) })
}

// confirmed handles the reply to a (un)subscribe of key.
func (s *Subscriber) confirmed(key string, sub bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.subs[key]
	if !sub || k == nil {
		return
	}
	if err == nil {
		k.active = true
	}
	if k.resync || err != nil && len(k.waiters) == 0 {
		k.resync = false
		for ch := range k.chans {
			signal(ch) // re-check: notifications may have been missed
		}
	}
	for _, w := range k.waiters {
		w <- err
	}
	k.waiters = nil
}

// remove ends one caller's subscription, closing its channel once.
func (s *Subscriber) remove(key string, ch chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.subs[key]
	if k == nil {
		return
	}
	if _, ok := k.chans[ch]; !ok {
		return
	}
	delete(k.chans, ch)
	close(ch)
	if len(k.chans) == 0 {
		delete(s.subs, key)
		if s.conn != nil && k.active {
			s.send(s.conn, key, false)
		}
	}
}

// run keeps a connection with every key subscribed until Close.
func (s *Subscriber) run() {
	defer s.wg.Done()
	backoff := 50 * time.Millisecond
	for s.ctx.Err() == nil {
		conn, err := s.opts.Connect(s.ctx)
		if err != nil {
			select {
			case <-s.ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			conn.Close()
			return
		}
		s.conn = conn
		for key := range s.subs {
			s.send(conn, key, true)
		}
		s.mu.Unlock()

		err = s.read(conn)

		s.mu.Lock()
		s.conn = nil
		s.pending = nil
		for _, k := range s.subs {
			if k.active {
				k.active, k.resync = false, true
			}
		}
		s.mu.Unlock()
		conn.Close()
	}
}

// read dispatches what arrives on conn until it fails.
func (s *Subscriber) read(conn *Conn) error {
	stop := context.AfterFunc(s.ctx, func() { conn.Close() })
	defer stop()
	for {
		v, err := conn.Receive()
		if err != nil {
			return err
		}
		if key, ok := s.opts.Push(v); ok {
			s.mu.Lock()
			for k, sk := range s.subs {
				if key == "" || k == key {
					for ch := range sk.chans {
						signal(ch)
					}
				}
			}
			s.mu.Unlock()
			continue
		}
		rerr := s.opts.Reply(v)
		s.mu.Lock()
		if len(s.pending) == 0 {
			s.mu.Unlock()
			return errors.New("reply without a command")
		}
		done := s.pending[0]
		s.pending = s.pending[1:]
		s.mu.Unlock()
		done(rerr)
	}
}

// Close ends every subscription (closing the channels) and the
// connection, and waits for its goroutines.
func (s *Subscriber) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.stop()
	for key, k := range s.subs {
		for ch := range k.chans {
			close(ch)
		}
		for _, w := range k.waiters {
			w <- ErrClientClosed
		}
		delete(s.subs, key)
	}
	s.mu.Unlock()
	s.wg.Wait()
}
