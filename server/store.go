package server

import (
	"context"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storekit"
)

// StoreOf presents a Backend as a leasehold.Store (with Watcher, Queuer
// and PermitWaiter),
// for using a server in-process: the recipes of package leasehold and the
// conformance suite run on it unchanged. When b keeps versioned records
// (it implements leasehold.RecordStore, as Engine and Proxy do), so does
// the store.
func StoreOf(b Backend) leasehold.Store {
	if rs, ok := b.(leasehold.RecordStore); ok {
		brs := backendRecordStore{backendStore{b}, rs}
		if p, ok := b.(*Proxy); ok && p.locksRecords() {
			// A proxy in front of PostgreSQL: row locks (the
			// workflows' Pessimistic strategy) are the store's.
			return backendLockerStore{brs, p}
		}
		return brs
	}
	return backendStore{b}
}

type backendStore struct{ b Backend }

func (s backendStore) TryAcquire(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	return s.b.Acquire(ctx, AcquireRequest{AcquireRequest: req})
}

// AcquireWait queues behind earlier waiters until granted or ctx ends.
func (s backendStore) AcquireWait(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	return s.b.Acquire(ctx, AcquireRequest{AcquireRequest: req, Wait: 1<<63 - 1})
}

// AcquirePermit takes one of a semaphore's permits in the backend
// (leasehold.PermitWaiter).
func (s backendStore) AcquirePermit(ctx context.Context, sem string, n int, req leasehold.AcquireRequest, wait time.Duration) (leasehold.Record, error) {
	return acquirePermit(ctx, s.b, sem, n, AcquireRequest{AcquireRequest: req, Wait: max(wait, 0)})
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
	if err := storekit.ValidateName(name); err != nil {
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

// backendRecordStore is a backendStore whose backend keeps records.
type backendRecordStore struct {
	backendStore
	rs leasehold.RecordStore
}

var _ leasehold.RecordStore = backendRecordStore{}

func (s backendRecordStore) GetRecord(ctx context.Context, key string) (leasehold.Versioned, error) {
	return s.rs.GetRecord(ctx, key)
}

func (s backendRecordStore) PutRecord(ctx context.Context, key string, value []byte, expect uint64) (uint64, error) {
	return s.rs.PutRecord(ctx, key, value, expect)
}

func (s backendRecordStore) DeleteRecord(ctx context.Context, key string, expect uint64) error {
	return s.rs.DeleteRecord(ctx, key, expect)
}

func (s backendRecordStore) AddCounter(ctx context.Context, key string, delta int64) (int64, uint64, error) {
	return s.rs.AddCounter(ctx, key, delta)
}

func (s backendRecordStore) Txn(ctx context.Context, txn leasehold.Txn) (leasehold.TxnResult, error) {
	return s.rs.Txn(ctx, txn)
}

// backendLockerStore is a backendRecordStore whose backend is a Proxy in
// front of a store that takes row locks (leasehold.RecordLocker).
type backendLockerStore struct {
	backendRecordStore
	p *Proxy
}

var _ leasehold.RecordLocker = backendLockerStore{}

func (s backendLockerStore) LockedTxn(ctx context.Context, key string, wait time.Duration, fn func(cur leasehold.Versioned, exists bool) (leasehold.Txn, error)) (leasehold.TxnResult, error) {
	return s.p.lockedTxn(ctx, key, wait, fn)
}
