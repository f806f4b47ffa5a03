package storetest

import (
	"context"
	"sync/atomic"

	"github.com/leasehold/leasehold"
)

// AlternateRecords returns a RecordStore that sends each call to the next
// of stores in turn, as several processes sharing one database would. Give
// it to CheckRecordHistories with Stores opened separately on the same
// database to check that they agree.
func AlternateRecords(stores ...leasehold.RecordStore) leasehold.RecordStore {
	if len(stores) == 0 {
		panic("storetest.AlternateRecords: no stores")
	}
	return &alternating{stores: stores}
}

type alternating struct {
	stores []leasehold.RecordStore
	n      atomic.Uint64
}

func (a *alternating) next() leasehold.RecordStore {
	return a.stores[a.n.Add(1)%uint64(len(a.stores))]
}

func (a *alternating) GetRecord(ctx context.Context, key string) (leasehold.Versioned, error) {
	return a.next().GetRecord(ctx, key)
}

func (a *alternating) PutRecord(ctx context.Context, key string, value []byte, expect uint64) (uint64, error) {
	return a.next().PutRecord(ctx, key, value, expect)
}

func (a *alternating) DeleteRecord(ctx context.Context, key string, expect uint64) error {
	return a.next().DeleteRecord(ctx, key, expect)
}

func (a *alternating) AddCounter(ctx context.Context, key string, delta int64) (int64, uint64, error) {
	return a.next().AddCounter(ctx, key, delta)
}

func (a *alternating) Txn(ctx context.Context, txn leasehold.Txn) (leasehold.TxnResult, error) {
	return a.next().Txn(ctx, txn)
}
