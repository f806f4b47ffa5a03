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
		s, err := redis.Open(ctx, rawURL)
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return s, nil
	}
	Register("redis", open)
	Register("rediss", open)
}
