package stores

import (
	"github.com/leasehold/leasehold/redis"
)

// redis:// and rediss:// open the Redis store (see package redis for the
// URL parameters).
func init() {
	Register("redis", opener(redis.Open))
	Register("rediss", opener(redis.Open))
}
