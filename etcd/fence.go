package etcd

import (
	"context"
	"fmt"
	"math"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storekit"
)

// Fencing: a lease alone cannot stop a holder that was paused (GC, swap, a
// stopped VM) past its expiry from writing after someone else took the
// lease over. The resource it writes can: FencedPut keeps, beside each
// protected key, the highest fencing token that has written it, and
// applies a write only if its token is at least that high, in one Txn. A
// stale holder's token is lower than its successor's, so once the
// successor has written, the stale write changes nothing.
//
// Use one lease name per protected resource, or at least the same name for
// every writer of a key: tokens of one store are etcd revisions, so they
// increase across names too, but a fence only means something between the
// holders of one lease.

// ErrFenced reports a fenced write that changed nothing because a writer
// with a newer token has already written. It matches leasehold.ErrLost
// with errors.Is, since a newer token means the lease was taken over.
var ErrFenced = fmt.Errorf("%w: fenced write refused: a newer token has written", leasehold.ErrLost)

// FenceKey is the key at which the fenced writes to key record their
// token: key + ".fence". Its value is the token in 20 decimal digits.
func FenceKey(key string) string { return key + ".fence" }

func tokenString(t uint64) string { return fmt.Sprintf("%020d", t) }

// FencedTxn applies ops, and records token at FenceKey(key), if token is
// at least the token recorded there (or none is); otherwise it returns
// ErrFenced and changes nothing. It is one etcd Txn (a nested one, since
// etcd cannot compare the value of a missing key): ops must not touch
// FenceKey(key) themselves. kv is usually the *clientv3.Client. Token 0 is
// an *leasehold.InvalidError; etcd errors come back as plain errors with
// etcd's message, and context errors pass through.
func FencedTxn(ctx context.Context, kv clientv3.KV, key string, token uint64, ops ...clientv3.Op) error {
	if err := storekit.ValidateToken(token); err != nil {
		return err
	}
	fk := FenceKey(key)
	then := append(append([]clientv3.Op(nil), ops...), clientv3.OpPut(fk, tokenString(token)))
	var cmps []clientv3.Cmp
	if token < math.MaxUint64 {
		cmps = append(cmps, clientv3.Compare(clientv3.Value(fk), "<", tokenString(token+1)))
	}
	resp, err := kv.Txn(ctx).If(cmpAbsent(fk)).Then(then...).
		Else(clientv3.OpTxn(cmps, then, nil)).Commit()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("etcd fenced write to %q: %s", key, err.Error())
	}
	if !resp.Succeeded && !resp.Responses[0].GetResponseTxn().GetSucceeded() {
		return ErrFenced
	}
	return nil
}

// FencedPut writes value at key with FencedTxn: only if token is at least
// the highest token that has written key this way.
func FencedPut(ctx context.Context, kv clientv3.KV, key, value string, token uint64) error {
	return FencedTxn(ctx, kv, key, token, clientv3.OpPut(key, value))
}

// HeldCmp returns a comparison that holds while the grant with this token
// still has its lease key in etcd: not released, and not expired and
// deleted. Put it in the If of your own Txn on the same etcd cluster to
// write only while the lease is held. It is stricter than FencedTxn
// (a released grant can no longer write) but, like every check made by
// etcd, it still passes for up to about 0.5 s after etcd expired the lease,
// until etcd deletes the key: a holder should also check its own
// Lease.Held before writing.
//
// It compares the grant's token key (a range compare over the name's
// keys, which etcd supports from 3.3), so it holds for a grant handed
// over by a release too; it does not hold for grants made by versions
// of this package without token keys.
func (s *Store) HeldCmp(name string, token uint64) clientv3.Cmp {
	return cmpToken(s.leaseKey(name), int64(token))
}
