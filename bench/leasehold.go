package main

import (
	"context"
	"errors"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/stores"
)

// leaseholdLockers returns leasehold through the Store interface directly
// (one TryAcquire + one Release) and through the Client (waiting with the
// store's push notification).
func leaseholdLockers(ctx context.Context, engine, url string) ([]locker, error) {
	store, err := stores.Open(ctx, url)
	if err != nil {
		return nil, err
	}
	atEnd(func() { store.Close() })
	const ttl = 10 * time.Second
	direct := locker{
		name: "leasehold " + engine + " (Store)",
		try: func(ctx context.Context, key string) (func(context.Context) error, bool, error) {
			rec, err := store.TryAcquire(ctx, leasehold.AcquireRequest{Name: key, Owner: "bench", TTL: ttl})
			if errors.Is(err, leasehold.ErrHeld) {
				return nil, false, nil
			}
			if err != nil {
				return nil, false, err
			}
			return func(ctx context.Context) error { return store.Release(ctx, key, "bench", rec.Token) }, true, nil
		},
	}
	shared, err := leasehold.New(store, leasehold.WithOwner("bench-"+engine))
	if err != nil {
		return nil, err
	}
	client := locker{
		name: "leasehold " + engine + " (Client)",
		try: func(ctx context.Context, key string) (func(context.Context) error, bool, error) {
			l, err := shared.TryAcquire(ctx, key, leasehold.TTL(ttl))
			if errors.Is(err, leasehold.ErrHeld) {
				return nil, false, nil
			}
			if err != nil {
				return nil, false, err
			}
			return l.Release, true, nil
		},
		wait: func(ctx context.Context, key string) (func(context.Context) error, error) {
			l, err := shared.Acquire(ctx, key, leasehold.TTL(ttl))
			if err != nil {
				return nil, err
			}
			return l.Release, nil
		},
	}
	return []locker{direct, client}, nil
}
