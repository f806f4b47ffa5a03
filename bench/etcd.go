package main

import (
	"context"
	"errors"
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/leasehold/leasehold/etcd"
)

// etcdLockers returns etcd's own concurrency.Mutex (the reference) and
// leasehold's etcd store, on the cluster of the store URL.
func etcdLockers(ctx context.Context, url string) ([]locker, error) {
	st, err := etcd.Open(ctx, url)
	if err != nil {
		return nil, err
	}
	atEnd(func() { st.Close() })
	sessions := &sessionPool{cli: st.Client()}
	atEnd(sessions.close)
	mutex := func(ctx context.Context, key string, try bool) (func(context.Context) error, bool, error) {
		s, err := sessions.get(ctx)
		if err != nil {
			return nil, false, err
		}
		m := concurrency.NewMutex(s, "bench/etcd-mutex/"+key)
		if try {
			err = m.TryLock(ctx)
		} else {
			err = m.Lock(ctx)
		}
		if errors.Is(err, concurrency.ErrLocked) {
			sessions.put(s)
			return nil, false, nil
		}
		if err != nil {
			sessions.put(s)
			return nil, false, err
		}
		return func(ctx context.Context) error {
			defer sessions.put(s)
			return m.Unlock(ctx)
		}, true, nil
	}
	ref := locker{
		name: "etcd concurrency.Mutex (session TTL 10 s, one session per waiter)",
		try: func(ctx context.Context, key string) (func(context.Context) error, bool, error) {
			return mutex(ctx, key, true)
		},
		wait: func(ctx context.Context, key string) (func(context.Context) error, error) {
			u, ok, err := mutex(ctx, key, false)
			if err == nil && !ok {
				err = fmt.Errorf("Lock returned without the lock")
			}
			return u, err
		},
	}
	ours, err := leaseholdLockers(ctx, "etcd", url)
	if err != nil {
		return nil, fmt.Errorf("leasehold on etcd: %w", err)
	}
	return append([]locker{ref}, ours...), nil
}

// sessionPool hands each concurrent Mutex user a session of its own (a
// Mutex's key is its session's lease: two holders on one session would
// both think they hold the lock).
type sessionPool struct {
	cli  *clientv3.Client
	mu   sync.Mutex
	free []*concurrency.Session
}

func (p *sessionPool) get(ctx context.Context) (*concurrency.Session, error) {
	p.mu.Lock()
	if n := len(p.free); n > 0 {
		s := p.free[n-1]
		p.free = p.free[:n-1]
		p.mu.Unlock()
		return s, nil
	}
	p.mu.Unlock()
	return concurrency.NewSession(p.cli, concurrency.WithTTL(10), concurrency.WithContext(context.WithoutCancel(ctx)))
}

func (p *sessionPool) put(s *concurrency.Session) {
	p.mu.Lock()
	p.free = append(p.free, s)
	p.mu.Unlock()
}

// close ends every idle session (revoking its lease).
func (p *sessionPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.free {
		s.Close()
	}
	p.free = nil
}
