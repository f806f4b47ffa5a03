package redis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/redis"
	"github.com/leasehold/leasehold/stores"
	"github.com/leasehold/leasehold/testrig/redissentinel"
)

// BenchmarkSentinelWait prices WithWait: acquire+release pairs through
// Sentinel on one private deployment (a primary, two replicas), the
// default store and stores waiting for one and for both replicas
// alternating in one loop, so that all three see the same load. It
// reports each one's median and p99 and the WAIT stores' medians over
// the default's:
//
//	go test -run '^$' -bench BenchmarkSentinelWait -benchtime 3000x ./redis/
func BenchmarkSentinelWait(b *testing.B) {
	d := redissentinel.Start(b, redissentinel.Options{})
	ctx := context.Background()
	open := func(q string) *redis.Store {
		s, err := stores.Open(ctx, d.URL("holdback=0s&prefix="+uniquePrefix(b)+q))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s.(*redis.Store)
	}
	pairs := []namedPair{
		{"default", storePair(open(""))},
		{"wait1", storePair(open("&wait_replicas=1&wait_timeout=1s"))},
		{"wait2", storePair(open("&wait_replicas=2&wait_timeout=1s"))},
	}
	p50 := interleaved(b, ctx, fmt.Sprintf("bench/w%d", time.Now().UnixNano()), pairs)
	b.ReportMetric(p50[1]/p50[0], "wait1/default")
	b.ReportMetric(p50[2]/p50[0], "wait2/default")
}
