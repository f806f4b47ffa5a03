package stores

import (
	"context"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/etcd"
)

// etcd:// and etcds:// open the etcd store (see package etcd for the URL
// parameters).
func init() {
	open := func(ctx context.Context, rawURL string) (leasehold.Store, error) {
		s, err := etcd.Open(ctx, rawURL)
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return s, nil
	}
	Register("etcd", open)
	Register("etcds", open)
}
