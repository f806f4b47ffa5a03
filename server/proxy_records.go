package server

import (
	"context"
	"errors"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storekit"
)

// ErrRecordsUnsupported reports a backend whose store keeps no versioned
// records (a Proxy in front of a store that does not implement
// leasehold.RecordStore). The HTTP API answers it with 501.
var ErrRecordsUnsupported = errors.New("versioned records are not supported by this server's store")

var _ leasehold.RecordStore = (*Proxy)(nil)

// records returns the proxied store's records, or the first failed check
// (firstError), or why there are none.
func (p *Proxy) records(checks ...error) (leasehold.RecordStore, error) {
	if err := firstError(checks...); err != nil {
		return nil, err
	}
	if p.isClosed() {
		return nil, leasehold.ErrClosed
	}
	rs, ok := p.store.(leasehold.RecordStore)
	if !ok {
		return nil, ErrRecordsUnsupported
	}
	return rs, nil
}

// SupportsRecords reports whether the proxied store keeps versioned
// records; when it does not, the RecordStore methods return
// ErrRecordsUnsupported.
func (p *Proxy) SupportsRecords() bool {
	_, ok := p.store.(leasehold.RecordStore)
	return ok
}

// GetRecord implements leasehold.RecordStore by passing the call to the
// store: records are the store's, and the proxy adds nothing to them.
func (p *Proxy) GetRecord(ctx context.Context, key string) (leasehold.Versioned, error) {
	rs, err := p.records(storekit.ValidateKey(key))
	if err != nil {
		return leasehold.Versioned{}, err
	}
	return rs.GetRecord(ctx, key)
}

// PutRecord implements leasehold.RecordStore (passed to the store).
func (p *Proxy) PutRecord(ctx context.Context, key string, value []byte, expect uint64) (uint64, error) {
	rs, err := p.records(storekit.ValidateKey(key), storekit.ValidateValue(value))
	if err != nil {
		return 0, err
	}
	return rs.PutRecord(ctx, key, value, expect)
}

// DeleteRecord implements leasehold.RecordStore (passed to the store).
func (p *Proxy) DeleteRecord(ctx context.Context, key string, expect uint64) error {
	rs, err := p.records(storekit.ValidateKey(key))
	if err != nil {
		return err
	}
	return rs.DeleteRecord(ctx, key, expect)
}

// AddCounter implements leasehold.RecordStore (passed to the store).
func (p *Proxy) AddCounter(ctx context.Context, key string, delta int64) (int64, uint64, error) {
	rs, err := p.records(storekit.ValidateKey(key))
	if err != nil {
		return 0, 0, err
	}
	return rs.AddCounter(ctx, key, delta)
}

// Txn implements leasehold.RecordStore (passed to the store, which may
// answer leasehold.ErrTxnUnsupported).
func (p *Proxy) Txn(ctx context.Context, txn leasehold.Txn) (leasehold.TxnResult, error) {
	rs, err := p.records(txn.Validate())
	if err != nil {
		return leasehold.TxnResult{}, err
	}
	return rs.Txn(ctx, txn)
}

// locksRecords reports whether the proxied store takes row locks
// (leasehold.RecordLocker: PostgreSQL).
func (p *Proxy) locksRecords() bool {
	_, ok := p.store.(leasehold.RecordLocker)
	return ok
}

// lockedTxn passes a LockedTxn to the store (locksRecords), after the
// checks of the other record calls.
func (p *Proxy) lockedTxn(ctx context.Context, key string, wait time.Duration, fn func(cur leasehold.Versioned, exists bool) (leasehold.Txn, error)) (leasehold.TxnResult, error) {
	rs, err := p.records(storekit.ValidateKey(key))
	if err != nil {
		return leasehold.TxnResult{}, err
	}
	rl, ok := rs.(leasehold.RecordLocker)
	if !ok {
		return leasehold.TxnResult{}, ErrRecordsUnsupported
	}
	return rl.LockedTxn(ctx, key, wait, fn)
}
