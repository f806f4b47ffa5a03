package etcd

import (
	"context"
	"fmt"
	"strconv"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/backoff"
	"github.com/leasehold/leasehold/storekit"
)

// Records (leasehold.RecordStore). A record is one etcd key, apart from
// the lease keys, holding the value as it is:
//
//	P + "r/" + key
//
// A record's version is the key's ModRevision: the revision of the etcd
// transaction that last wrote it. Revisions are global to the etcd
// cluster, so versions are not consecutive but only ever increase, and are
// never reused, even when a key is deleted and created again.
//
// GetRecord is one Get; PutRecord and DeleteRecord are one etcd Txn each,
// comparing the ModRevision (or CreateRevision = 0 for "absent") and
// reading the key in the Else branch to report the version found. etcd has
// no increment, so AddCounter reads the counter and writes it back in a Txn
// compared on the ModRevision it read; when another write came between, the
// Txn's Else branch reads the new value and it tries again (with jittered
// backoff after the first retries). Each attempt either applies the whole
// add or nothing, so the add is atomic. Txn is one etcd Txn with every
// condition as a comparison (a transaction with adds reads those counters
// first, and is retried like AddCounter if one changes meanwhile).
//
// etcd refuses requests larger than its --max-request-bytes (1.5 MiB by
// default), so a Txn carrying many large values may be refused as a whole.
var _ leasehold.RecordStore = (*Store)(nil)

// maxAddAttempts bounds the read-and-compare rounds of an add. Every round
// that fails does so because another write of the counter succeeded.
const maxAddAttempts = 1000

func (s *Store) recordKey(key string) string { return s.prefix + "r/" + key }

// GetRecord implements leasehold.RecordStore with one linearizable Get.
func (s *Store) GetRecord(ctx context.Context, key string) (leasehold.Versioned, error) {
	if err := storekit.ValidateKey(key); err != nil {
		return leasehold.Versioned{}, err
	}
	if err := s.begin(ctx); err != nil {
		return leasehold.Versioned{}, err
	}
	resp, err := s.cli.Get(ctx, s.recordKey(key))
	if err != nil {
		return leasehold.Versioned{}, s.fail(ctx, "get record", err)
	}
	if len(resp.Kvs) == 0 {
		return leasehold.Versioned{}, leasehold.ErrNotFound
	}
	kv := resp.Kvs[0]
	return leasehold.Versioned{Key: key, Value: valueOf(kv), Version: uint64(kv.ModRevision)}, nil
}

// cmpVersion holds when the record at rk is at version v (0: absent). An
// absent key compares as ModRevision 0.
func cmpVersion(rk string, v uint64) clientv3.Cmp {
	if v == 0 {
		return cmpAbsent(rk)
	}
	return clientv3.Compare(clientv3.ModRevision(rk), "=", int64(v))
}

// PutRecord implements leasehold.RecordStore with one etcd Txn.
func (s *Store) PutRecord(ctx context.Context, key string, value []byte, expect uint64) (uint64, error) {
	if err := storekit.ValidatePut(key, value); err != nil {
		return 0, err
	}
	if err := s.begin(ctx); err != nil {
		return 0, err
	}
	if expect > 1<<63-1 {
		return 0, s.conflictNow(ctx, key, expect)
	}
	rk := s.recordKey(key)
	resp, err := s.cli.Txn(ctx).If(cmpVersion(rk, expect)).
		Then(clientv3.OpPut(rk, string(value))).Else(clientv3.OpGet(rk, clientv3.WithKeysOnly())).Commit()
	if err != nil {
		return 0, s.fail(ctx, "put record", err)
	}
	if !resp.Succeeded {
		return 0, &leasehold.ConflictError{Key: key, Expected: expect, Actual: modOf(resp.Responses[0])}
	}
	return uint64(resp.Header.Revision), nil
}

// conflictNow reports a version that cannot exist (above int64) as a
// conflict with the version the record has.
func (s *Store) conflictNow(ctx context.Context, key string, expect uint64) error {
	resp, err := s.cli.Get(ctx, s.recordKey(key), clientv3.WithKeysOnly())
	if err != nil {
		return s.fail(ctx, "record", err)
	}
	var actual uint64
	if len(resp.Kvs) > 0 {
		actual = uint64(resp.Kvs[0].ModRevision)
	}
	return &leasehold.ConflictError{Key: key, Expected: expect, Actual: actual}
}

// DeleteRecord implements leasehold.RecordStore with one etcd Txn.
func (s *Store) DeleteRecord(ctx context.Context, key string, expect uint64) error {
	if err := storekit.ValidateKey(key); err != nil {
		return err
	}
	if err := s.begin(ctx); err != nil {
		return err
	}
	if expect > 1<<63-1 {
		err := s.conflictNow(ctx, key, expect)
		if ce, ok := err.(*leasehold.ConflictError); ok && ce.Actual == 0 {
			return leasehold.ErrNotFound
		}
		return err
	}
	rk := s.recordKey(key)
	// ModRevision = expect: with expect 0 that means absent, and the
	// delete deletes nothing.
	resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(rk), "=", int64(expect))).
		Then(clientv3.OpDelete(rk)).Else(clientv3.OpGet(rk, clientv3.WithKeysOnly())).Commit()
	if err != nil {
		return s.fail(ctx, "delete record", err)
	}
	if resp.Succeeded {
		if expect == 0 {
			return leasehold.ErrNotFound
		}
		return nil
	}
	actual := modOf(resp.Responses[0])
	if actual == 0 {
		return leasehold.ErrNotFound
	}
	return &leasehold.ConflictError{Key: key, Expected: expect, Actual: actual}
}

// AddCounter implements leasehold.RecordStore: a Get, then a Txn that
// writes the sum if the counter is still at the version read, repeated
// with the value its Else branch reads until one applies.
func (s *Store) AddCounter(ctx context.Context, key string, delta int64) (int64, uint64, error) {
	if err := storekit.ValidateKey(key); err != nil {
		return 0, 0, err
	}
	if err := s.begin(ctx); err != nil {
		return 0, 0, err
	}
	rk := s.recordKey(key)
	resp, err := s.cli.Get(ctx, rk)
	if err != nil {
		return 0, 0, s.fail(ctx, "add to counter", err)
	}
	kv := first(resp.Kvs)
	var b retryWait
	for attempt := 1; ; attempt++ {
		n, err := addTo(key, kv, delta)
		if err != nil {
			return 0, 0, err
		}
		mod := int64(0)
		if kv != nil {
			mod = kv.ModRevision
		}
		tr, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(rk), "=", mod)).
			Then(clientv3.OpPut(rk, strconv.FormatInt(n, 10))).Else(clientv3.OpGet(rk)).Commit()
		if err != nil {
			return 0, 0, s.fail(ctx, "add to counter", err)
		}
		if tr.Succeeded {
			return n, uint64(tr.Header.Revision), nil
		}
		if attempt == maxAddAttempts {
			return 0, 0, fmt.Errorf("etcd add to counter %q: the counter kept changing; gave up after %d attempts", key, attempt)
		}
		kv = first(tr.Responses[0].GetResponseRange().Kvs)
		if err := b.wait(ctx, attempt); err != nil {
			return 0, 0, err
		}
	}
}

// addTo returns the counter in kv (nil: absent, 0) plus delta, or an
// *leasehold.InvalidError if kv is not a counter or the sum overflows.
func addTo(key string, kv *mvccpb.KeyValue, delta int64) (int64, error) {
	var n int64
	if kv != nil {
		var err error
		if n, err = storekit.ParseCounter(key, kv.Value); err != nil {
			return 0, err
		}
	}
	return storekit.AddInt64(key, n, delta)
}

// Txn implements leasehold.RecordStore with one etcd Txn: the conditions
// are its comparisons, the writes its Then operations, and its Else
// branch reads the conditioned keys to report which failed. With adds, the
// counters (and the conditioned keys) are read first in one read-only Txn,
// the counters' ModRevisions are compared too, and the Txn is sent again
// with the values read in its Else branch if a counter changed meanwhile
// while every condition still held.
func (s *Store) Txn(ctx context.Context, txn leasehold.Txn) (leasehold.TxnResult, error) {
	if err := txn.Validate(); err != nil {
		return leasehold.TxnResult{}, err
	}
	if err := s.begin(ctx); err != nil {
		return leasehold.TxnResult{}, err
	}
	for _, c := range txn.If {
		if c.Version > 1<<63-1 {
			return leasehold.TxnResult{}, s.conflictNow(ctx, c.Key, c.Version)
		}
	}
	// The keys read by the Else branch (and by the first read, with adds):
	// the conditioned keys in order, then the counters not conditioned.
	var reads []string
	at := map[string]int{}
	for _, c := range txn.If {
		at[c.Key] = len(reads)
		reads = append(reads, c.Key)
	}
	var adds []int // indexes in txn.Then
	for i, w := range txn.Then {
		if w.Add != 0 && !w.Delete && w.Value == nil {
			adds = append(adds, i)
			if _, ok := at[w.Key]; !ok {
				at[w.Key] = len(reads)
				reads = append(reads, w.Key)
			}
		}
	}
	gets := make([]clientv3.Op, len(reads))
	for i, k := range reads {
		gets[i] = clientv3.OpGet(s.recordKey(k))
	}
	// state holds the latest reads (nil: absent), when there are adds.
	var state []*mvccpb.KeyValue
	if len(adds) > 0 {
		resp, err := s.cli.Txn(ctx).Then(gets...).Commit()
		if err != nil {
			return leasehold.TxnResult{}, s.fail(ctx, "txn", err)
		}
		state = kvsOf(resp.Responses)
	}
	var b retryWait
	for attempt := 1; ; attempt++ {
		if state != nil {
			// Conditions first, as if the Txn had been sent at the read.
			if err := s.checkConditions(txn, state); err != nil {
				return leasehold.TxnResult{}, err
			}
		}
		cmps := make([]clientv3.Cmp, 0, len(txn.If)+len(adds))
		for _, c := range txn.If {
			cmps = append(cmps, cmpVersion(s.recordKey(c.Key), c.Version))
		}
		ops := make([]clientv3.Op, len(txn.Then))
		for i, w := range txn.Then {
			rk := s.recordKey(w.Key)
			switch {
			case w.Delete:
				ops[i] = clientv3.OpDelete(rk)
			case w.Value == nil && w.Add != 0:
				kv := state[at[w.Key]]
				n, err := addTo(w.Key, kv, w.Add)
				if err != nil {
					return leasehold.TxnResult{}, err
				}
				mod := int64(0)
				if kv != nil {
					mod = kv.ModRevision
				}
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(rk), "=", mod))
				ops[i] = clientv3.OpPut(rk, strconv.FormatInt(n, 10))
			default:
				ops[i] = clientv3.OpPut(rk, string(w.Value))
			}
		}
		resp, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Else(gets...).Commit()
		if err != nil {
			return leasehold.TxnResult{}, s.fail(ctx, "txn", err)
		}
		if resp.Succeeded {
			out := leasehold.TxnResult{Versions: make(map[string]uint64, len(txn.Then))}
			for _, w := range txn.Then {
				if w.Delete {
					out.Versions[w.Key] = 0
				} else {
					out.Versions[w.Key] = uint64(resp.Header.Revision)
				}
			}
			return out, nil
		}
		state = kvsOf(resp.Responses)
		if err := s.checkConditions(txn, state); err != nil {
			return leasehold.TxnResult{}, err
		}
		// Every condition held: a counter changed since it was read.
		if attempt == maxAddAttempts {
			return leasehold.TxnResult{}, fmt.Errorf("etcd txn: its counters kept changing; gave up after %d attempts", attempt)
		}
		if err := b.wait(ctx, attempt); err != nil {
			return leasehold.TxnResult{}, err
		}
	}
}

// checkConditions returns a *leasehold.ConflictError for the first
// condition of txn that the reads in state (in the order of txn.If) fail.
func (s *Store) checkConditions(txn leasehold.Txn, state []*mvccpb.KeyValue) error {
	for i, c := range txn.If {
		var actual uint64
		if kv := state[i]; kv != nil {
			actual = uint64(kv.ModRevision)
		}
		if actual != c.Version {
			return &leasehold.ConflictError{Key: c.Key, Expected: c.Version, Actual: actual}
		}
	}
	return nil
}

func kvsOf(rs []*pb.ResponseOp) []*mvccpb.KeyValue {
	out := make([]*mvccpb.KeyValue, len(rs))
	for i, r := range rs {
		out[i] = first(r.GetResponseRange().Kvs)
	}
	return out
}

func first(kvs []*mvccpb.KeyValue) *mvccpb.KeyValue {
	if len(kvs) == 0 {
		return nil
	}
	return kvs[0]
}

// modOf returns the ModRevision read by a Get response (0: absent).
func modOf(r *pb.ResponseOp) uint64 {
	if kv := first(r.GetResponseRange().Kvs); kv != nil {
		return uint64(kv.ModRevision)
	}
	return 0
}

func valueOf(kv *mvccpb.KeyValue) []byte {
	if len(kv.Value) == 0 {
		return []byte{}
	}
	return kv.Value
}

// retryWait spaces the retries of a contended write: none after the first
// failures, then full jitter up to a bound doubling from 1ms to 50ms.
type retryWait struct{ b *backoff.Backoff }

func (r *retryWait) wait(ctx context.Context, attempt int) error {
	if attempt < 3 {
		return nil
	}
	if r.b == nil {
		r.b = backoff.NewFull(time.Millisecond, 50*time.Millisecond)
	}
	return backoff.Sleep(ctx, r.b.Next())
}
