package etcd

import (
	"context"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"

	"github.com/leasehold/leasehold"
)

// waitDeleted returns when key (read at revision from-1 with CreateRevision
// create) is deleted at or after revision from, when the watch breaks (the
// caller reads again), or when the waiter's session ends; with ctx's error
// when ctx ends. When key is the lease key, it also returns, with the
// lease key as written, when a release hands the lease to this waiter
// (handedTo). Meanwhile it keeps the prepared lease fresh (keepPrepared).
//
// The watch starts at etcd's current revision rather than at from: etcd
// catches a watch that starts in the past up with the present only in a
// loop that runs every 100 ms, which would delay the handoff by 50 ms on
// average. So when etcd's revision moved on between the read and the
// watch's creation, the key is read again (a read-only request) to learn
// whether it went meanwhile.
func (w *waiter) waitDeleted(ctx context.Context, key string, from, create int64) (*mvccpb.KeyValue, error) {
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
	keep := time.NewTicker(time.Second)
	defer keep.Stop()
	for {
		select {
		case resp, ok := <-wch:
			if !ok || resp.Err() != nil || resp.Canceled {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				if w.s.isClosed() {
					return nil, leasehold.ErrClosed
				}
				return nil, nil
			}
			gone := false
			for _, ev := range resp.Events {
				switch {
				case ev.Type == mvccpb.DELETE:
					gone = true
				case key == w.lk && w.handedTo(ev.Kv):
					return ev.Kv, nil
				}
			}
			if gone {
				return nil, nil
			}
			if resp.Created && !created {
				created = true
				if resp.Header.Revision >= from {
					r, err := w.s.cli.Get(w.octx, key)
					switch {
					case err != nil || len(r.Kvs) == 0 || r.Kvs[0].CreateRevision != create:
						return nil, nil
					case key == w.lk && w.handedTo(r.Kvs[0]):
						return r.Kvs[0], nil
					}
				}
			}
		case <-keep.C:
			w.keepPrepared(ctx)
		case <-w.se.done:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
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
	opts := []clientv3.OpOption{clientv3.WithCreatedNotify()}
	if key != w.lk {
		opts = append(opts, clientv3.WithFilterPut()) // the lease key's puts may be a grant handed to this waiter
	}
	return w.s.cli.Watch(wctx, key, opts...), func() { stop(); cancel() }
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
