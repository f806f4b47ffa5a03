package stores

import (
	"context"
	"net/url"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/etcd"
)

// The etcd store, plain and over TLS (system roots):
//
//	etcd://host:2379[,host:port...]/?prefix=leasehold/&dial_timeout=5s
//	etcds://user:password@host:2379/
//
// The URL goes to etcd.Open as is; see there for its parameters. etcd
// needs no preparation, so "leasehold store init" just opens the store
// (which checks that it can reach etcd and read under the prefix).
func init() {
	open := func(ctx context.Context, u *url.URL) (leasehold.Store, error) {
		s, err := etcd.Open(ctx, u.String())
		if err != nil {
			return nil, err // not a typed nil in a non-nil interface
		}
		return s, nil
	}
	Register("etcd", open)
	Register("etcds", open)
}
