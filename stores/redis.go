package stores

import (
	"context"
	"net/url"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/redis"
)

// Redis URLs, opened by redis.Open:
//
//	redis://[[user]:password@]host[:port][/db][?holdback=30s&prefix=leasehold:]
//	rediss://...   the same over TLS
func init() {
	Register("redis", openRedis)
	Register("rediss", openRedis)
}

func openRedis(ctx context.Context, u *url.URL) (leasehold.Store, error) {
	s, err := redis.Open(ctx, u.String())
	if err != nil {
		return nil, err
	}
	return s, nil
}
