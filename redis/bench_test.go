package redis_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/redis"
)

// Run with (a private redis-server is started unless LEASEHOLD_TEST_REDIS
// is set):
//
//	go test -run '^$' -bench . -benchtime 5000x ./redis/
//
// Each sequential sub-benchmark reports the median and p99 of one
// acquire+release pair beside ns/op. "raw" is the reference: the bare Redis
// lock pair on the same server, SET key owner NX PX 10000 followed by a Lua
// compare-and-delete; "store" is Store.TryAcquire + Store.Release; "client"
// goes through Client.TryAcquire and Lease.Release (which also starts and
// stops the keepalive goroutine). The parallel variants run 32 goroutines on
// distinct names and report pairs/s. BenchmarkAcquireReleaseInterleaved
// alternates raw, store and client pairs in one loop.

var compareAndDelete = goredis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

func benchServer(b *testing.B) (url string, rdb *goredis.Client, s *redis.Store) {
	url = sharedURL(b)
	opt, err := goredis.ParseURL(url)
	if err != nil {
		b.Fatal(err)
	}
	rdb = goredis.NewClient(opt)
	b.Cleanup(func() { rdb.Close() })
	s = open(b, url, redis.WithKeyPrefix(uniquePrefix(b)), redis.WithHoldback(0))
	b.Cleanup(func() { s.Close() })
	return url, rdb, s
}

type pair func(ctx context.Context, name string) error

func rawPair(rdb *goredis.Client, prefix string) pair {
	return func(ctx context.Context, name string) error {
		key := prefix + name
		ok, err := rdb.SetNX(ctx, key, "me", 10*time.Second).Result()
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("raw lock %q held", key)
		}
		n, err := compareAndDelete.Run(ctx, rdb, []string{key}, "me").Int64()
		if err == nil && n != 1 {
			err = fmt.Errorf("raw unlock %q: not held", key)
		}
		return err
	}
}

func storePair(s *redis.Store) pair {
	return func(ctx context.Context, name string) error {
		rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: name, Owner: "me", TTL: 10 * time.Second})
		if err != nil {
			return err
		}
		return s.Release(ctx, name, "me", rec.Token)
	}
}

func clientPair(b *testing.B, s *redis.Store) pair {
	c, err := leasehold.New(s, leasehold.WithOwner("me"))
	if err != nil {
		b.Fatal(err)
	}
	return func(ctx context.Context, name string) error {
		l, err := c.TryAcquire(ctx, name, leasehold.TTL(10*time.Second))
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}
}

func benchSeq(b *testing.B, p pair) {
	ctx := context.Background()
	name := fmt.Sprintf("bench/%d", time.Now().UnixNano())
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := p(ctx, name); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
}

func benchPar(b *testing.B, p pair) {
	var id atomic.Int64
	base := time.Now().UnixNano()
	b.SetParallelism(16) // 2 cores × 16 = 32 goroutines
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		name := fmt.Sprintf("bench/p%d-%d", base, id.Add(1))
		for pb.Next() {
			if err := p(ctx, name); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
}

func BenchmarkAcquireRelease(b *testing.B) {
	_, rdb, s := benchServer(b)
	raw := rawPair(rdb, s.KeyPrefix()+"raw:")
	b.Run("raw", func(b *testing.B) { benchSeq(b, raw) })
	b.Run("store", func(b *testing.B) { benchSeq(b, storePair(s)) })
	b.Run("client", func(b *testing.B) { benchSeq(b, clientPair(b, s)) })
}

// BenchmarkAcquireReleaseInterleaved runs one raw, one store and one
// client pair per iteration, each first in turn, so that all three meet
// the same load of a busy machine; it reports each one's median and p99
// and the store's and the client's median over raw's (compare these
// ratios, not the microseconds, between runs).
func BenchmarkAcquireReleaseInterleaved(b *testing.B) {
	_, rdb, s := benchServer(b)
	pairs := []namedPair{
		{"raw", rawPair(rdb, s.KeyPrefix()+"raw:")},
		{"store", storePair(s)},
		{"client", clientPair(b, s)},
	}
	ctx := context.Background()
	p50 := interleaved(b, ctx, fmt.Sprintf("bench/i%d", time.Now().UnixNano()), pairs)
	b.ReportMetric(p50[1]/p50[0], "store/raw")
	b.ReportMetric(p50[2]/p50[0], "client/raw")
}

func BenchmarkAcquireReleaseParallel(b *testing.B) {
	_, rdb, s := benchServer(b)
	raw := rawPair(rdb, s.KeyPrefix()+"raw:")
	b.Run("raw", func(b *testing.B) { benchPar(b, raw) })
	b.Run("store", func(b *testing.B) { benchPar(b, storePair(s)) })
}

// namedPair is one pair of an interleaved benchmark, with its metric name.
type namedPair struct {
	name string
	p    pair
}

// interleaved runs one of each pair per iteration on lease name, each
// first in turn, so that all meet the same load of a busy machine; it
// reports each one's median and p99 and returns the medians (µs).
func interleaved(b *testing.B, ctx context.Context, name string, pairs []namedPair) []float64 {
	lat := make([][]time.Duration, len(pairs))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k := range pairs {
			j := (i + k) % len(pairs)
			t0 := time.Now()
			if err := pairs[j].p(ctx, name); err != nil {
				b.Fatal(err)
			}
			lat[j] = append(lat[j], time.Since(t0))
		}
	}
	b.StopTimer()
	p50 := make([]float64, len(pairs))
	for j, l := range lat {
		slices.Sort(l)
		p50[j] = float64(l[len(l)/2].Nanoseconds()) / 1e3
		b.ReportMetric(p50[j], pairs[j].name+"-p50-µs")
		b.ReportMetric(float64(l[len(l)*99/100].Nanoseconds())/1e3, pairs[j].name+"-p99-µs")
	}
	return p50
}
