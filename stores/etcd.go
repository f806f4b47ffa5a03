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
		return asStore(etcd.Open(ctx, rawURL))
	}
	Register("etcd", open)
	Register("etcds", open)
}
