package etcd

import (
	"context"
	"errors"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// refresher refreshes spare etcd leases over one long-lived LeaseKeepAlive
// stream, instead of opening a stream per refresh as KeepAliveOnce does;
// the refresh runs beside every acquire Txn, so this saves a stream set-up
// on the acquire path. Only spares are refreshed here, which have at least
// half their TTL left: etcd holds up a refresh of an expired lease until it
// is revoked, and on a shared stream that would hold up the others too.
// When the stream fails, a refresh falls back to KeepAliveOnce.
type refresher struct {
	cli  *clientv3.Client
	stop context.Context

	mu      sync.Mutex
	stream  pb.Lease_LeaseKeepAliveClient
	waiting map[int64][]chan error // by lease id, in the order sent
}

var errStreamBroken = errors.New("keepalive stream broken")

func newRefresher(cli *clientv3.Client, stop context.Context) *refresher {
	return &refresher{cli: cli, stop: stop, waiting: map[int64][]chan error{}}
}

// refresh renews lease id; rpctypes.ErrLeaseNotFound if it is gone.
func (r *refresher) refresh(ctx context.Context, id clientv3.LeaseID) error {
	ch, ok := r.send(id)
	if ok {
		select {
		case err := <-ch:
			if !errors.Is(err, errStreamBroken) {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	_, err := r.cli.KeepAliveOnce(ctx, id)
	return err
}

func (r *refresher) send(id clientv3.LeaseID) (chan error, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stream == nil {
		if r.stop.Err() != nil {
			return nil, false
		}
		st, err := pb.NewLeaseClient(r.cli.ActiveConnection()).LeaseKeepAlive(clientv3.WithRequireLeader(r.stop))
		if err != nil {
			return nil, false
		}
		r.stream = st
		go r.receive(st)
	}
	if err := r.stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(id)}); err != nil {
		r.stream = nil // receive fails the waiters
		return nil, false
	}
	ch := make(chan error, 1)
	r.waiting[int64(id)] = append(r.waiting[int64(id)], ch)
	return ch, true
}

func (r *refresher) receive(st pb.Lease_LeaseKeepAliveClient) {
	for {
		resp, err := st.Recv()
		r.mu.Lock()
		if err != nil {
			if r.stream == st {
				r.stream = nil
			}
			for id, chs := range r.waiting {
				for _, ch := range chs {
					ch <- errStreamBroken
				}
				delete(r.waiting, id)
			}
			r.mu.Unlock()
			return
		}
		var ch chan error
		if chs := r.waiting[resp.ID]; len(chs) > 0 {
			ch, r.waiting[resp.ID] = chs[0], chs[1:]
			if len(chs) == 1 {
				delete(r.waiting, resp.ID)
			}
		}
		r.mu.Unlock()
		if ch == nil {
			continue
		}
		if resp.TTL <= 0 {
			ch <- rpctypes.ErrLeaseNotFound
		} else {
			ch <- nil
		}
	}
}
