package server

import (
	"context"
	"time"

	"github.com/leasehold/leasehold"
)

// StoreOf presents a Backend as a leasehold.Store (with Watcher and Queuer),
// for using a server in-process: the recipes of package leasehold and the
// conformance suite run on it unchanged.
func StoreOf(b Backend) leasehold.Store { return backendStore{b} }

type backendStore struct{ b Backend }

func (s backendStore) TryAcquire(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	return s.b.Acquire(ctx, AcquireRequest{AcquireRequest: req})
}

// AcquireWait queues behind earlier waiters until granted or ctx ends.
func (s backendStore) AcquireWait(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	return s.b.Acquire(ctx, AcquireRequest{AcquireRequest: req, Wait: 1<<63 - 1})
}

func (s backendStore) Renew(ctx context.Context, name, owner string, token uint64, ttl time.Duration) error {
	return s.b.Renew(ctx, name, owner, token, ttl)
}

func (s backendStore) Release(ctx context.Context, name, owner string, token uint64) error {
	return s.b.Release(ctx, name, owner, token)
}

func (s backendStore) Get(ctx context.Context, name string) (leasehold.Record, error) {
	return s.b.Get(ctx, name)
}

func (s backendStore) List(ctx context.Context, prefix string) ([]leasehold.Record, error) {
	return s.b.List(ctx, prefix)
}

// Watch signals releases, expiries and forced releases of name.
func (s backendStore) Watch(ctx context.Context, name string) (<-chan struct{}, error) {
	if err := leasehold.ValidateName(name); err != nil {
		return nil, err
	}
	events := s.b.Subscribe(ctx, name)
	out := make(chan struct{}, 1)
	go func() {
		defer close(out)
		for ev := range events {
			if ev.Name != name && ev.Type != EventOverflow {
				continue
			}
			switch ev.Type {
			case EventReleased, EventExpired, EventForced, EventOverflow:
				select {
				case out <- struct{}{}:
				default:
				}
			}
		}
	}()
	return out, nil
}

func (s backendStore) Close() error { return s.b.Close() }
