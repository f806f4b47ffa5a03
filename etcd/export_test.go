package etcd

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// QueuedOwners returns the owners of name's queue entries, oldest first,
// as etcd holds them (for the conformance harness's Queued).
func QueuedOwners(ctx context.Context, s *Store, name string) ([]string, error) {
	resp, err := s.cli.Get(ctx, s.queuePrefix(name), append(clientv3.WithFirstCreate(), clientv3.WithPrefix(), clientv3.WithLimit(0))...)
	if err != nil {
		return nil, err
	}
	var owners []string
	for _, kv := range resp.Kvs {
		r, _, err := decodeEntry(kv.Value)
		if err != nil {
			return nil, err
		}
		owners = append(owners, r.owner)
	}
	return owners, nil
}
