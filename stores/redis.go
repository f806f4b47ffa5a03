package stores

import (
	"context"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/redis"
)

// redis:// and rediss:// open the Redis store (see package redis for the
// URL parameters).
func init() {
	open := func(ctx context.Context, rawURL string) (leasehold.Store, error) {
		return asStore(redis.Open(ctx, rawURL))
	}
	Register("redis", open)
	Register("rediss", open)
}
