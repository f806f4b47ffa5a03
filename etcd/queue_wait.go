package etcd

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"

	"github.com/leasehold/leasehold"
)

// waitDeleted returns when key (read at revision from-1 with CreateRevision
// create) is deleted at or after revision from, when the watch breaks (the
// caller reads again), or when the waiter's session ends; with ctx's error
// when ctx ends.
//
// The watch starts at etcd's current revision rather than at from: etcd
// catches a watch that starts in the past up with the present only in a
// loop that runs every 100 ms, which would delay the handoff by 50 ms on
// average. So when etcd's revision moved on between the read and the
// watch's creation, the key is read again (a read-only request) to learn
// whether it went meanwhile.
func (w *waiter) waitDeleted(ctx context.Context, key string, from, create int64) error {
	var wch clientv3.WatchChan
	var cancel func()
	if key == w.lk && w.pre != nil {
		wch, cancel = w.pre.ch, w.pre.cancel
		w.pre = nil
	} else {
		wch, cancel = w.openWatch(ctx, key)
	}
	defer cancel()
	created := false
	for {
		select {
		case resp, ok := <-wch:
			if !ok || resp.Err() != nil || resp.Canceled {
				if err := ctx.Err(); err != nil {
					return err
				}
				if w.s.isClosed() {
					return leasehold.ErrClosed
				}
				return nil
			}
			if len(resp.Events) > 0 {
				return nil
			}
			if resp.Created && !created {
				created = true
				if resp.Header.Revision >= from {
					r, err := w.s.cli.Get(w.octx, key, clientv3.WithKeysOnly())
					if err != nil || len(r.Kvs) == 0 || r.Kvs[0].CreateRevision != create {
						return nil
					}
				}
			}
		case <-w.se.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// openWatch watches key's deletions from etcd's current revision (see
// waitDeleted), reporting its creation.
func (w *waiter) openWatch(ctx context.Context, key string) (clientv3.WatchChan, func()) {
	wctx := clientv3.WithRequireLeader(ctx)
	if key == w.lk {
		// The head's watch goes on a watch stream of its own: the etcd
		// client registers the watches of one stream one at a time, and
		// the handoff should not wait behind the other waiters'.
		wctx = metadata.AppendToOutgoingContext(wctx, "leasehold-watch", "head")
	}
	wctx, cancel := context.WithCancel(wctx)
	stop := context.AfterFunc(w.s.stop, cancel)
	return w.s.cli.Watch(wctx, key, clientv3.WithFilterPut(), clientv3.WithCreatedNotify()), func() { stop(); cancel() }
}

// preWatch is a watch of the lease key opened before the read that made
// the waiter the head: its creation revision then precedes the read, so
// no deletion after the read can be missed and the key need not be read
// again (waitDeleted).
type preWatch struct {
	ch     clientv3.WatchChan
	cancel func()
}

func (w *waiter) closePre() {
	if w.pre != nil {
		w.pre.cancel()
		w.pre = nil
	}
}
