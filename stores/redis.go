package stores

import (
	"github.com/leasehold/leasehold/redis"
)

// redis:// and rediss:// open the Redis store, redis+sentinel:// the same
// through Redis Sentinel (see package redis for the URL parameters).
func init() {
	Register("redis", opener(redis.Open))
	Register("rediss", opener(redis.Open))
	Register(redis.SentinelScheme, opener(redis.Open))
}
