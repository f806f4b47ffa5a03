package etcd_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/etcd"
	"github.com/leasehold/leasehold/internal/enginetest"
)

// Run with the shared test etcd (see scripts/engines.sh):
//
//	go test -run '^$' -bench . -benchtime 3000x ./etcd/
//
// BenchmarkAcquireRelease reports the median and p99 of one uncontended
// acquire+release pair beside ns/op: "mutex" is the reference, etcd's own
// concurrency.Mutex (Lock and Unlock on a session made beforehand, so one
// Txn and one Delete); "store" calls the Store (TryAcquire and Release,
// TTL 10s); "client" goes through Client.TryAcquire and Lease.Release.
// BenchmarkHandoff has 8 waiters, each with a connection of its own, take
// turns on one lock and reports the time from the holder starting to
// release to the next waiter holding it.

func percentiles(b *testing.B, lat []time.Duration, unit string) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-"+unit)
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-"+unit)
}

func timed(b *testing.B, pair func(ctx context.Context) error) {
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	for i := 0; i < 20; i++ { // warm up connections and spare leases
		if err := pair(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := pair(ctx); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	percentiles(b, lat, "µs")
}

func newClient(b testing.TB, s *etcd.Store) *clientv3.Client {
	cli, err := clientv3.New(clientv3.Config{Endpoints: s.Client().Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cli.Close() })
	return cli
}

func mutexLocker(b testing.TB, cli *clientv3.Client, key string) (lock, unlock func(ctx context.Context) error) {
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sess.Close() })
	m := concurrency.NewMutex(sess, key)
	return m.Lock, m.Unlock
}

func BenchmarkAcquireRelease(b *testing.B) {
	u := freshURL(b, enginetest.EtcdURL(b))
	s := open(b, u)
	defer s.Close()
	b.Run("mutex", func(b *testing.B) {
		lock, unlock := mutexLocker(b, newClient(b, s), s.Prefix()+"mutex/lock")
		timed(b, func(ctx context.Context) error {
			if err := lock(ctx); err != nil {
				return err
			}
			return unlock(ctx)
		})
	})
	b.Run("store", func(b *testing.B) {
		timed(b, func(ctx context.Context) error {
			rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "bench/lock", Owner: "me", TTL: 10 * time.Second})
			if err != nil {
				return err
			}
			return s.Release(ctx, "bench/lock", "me", rec.Token)
		})
	})
	b.Run("client", func(b *testing.B) {
		c, err := leasehold.New(s, leasehold.WithOwner("me"))
		if err != nil {
			b.Fatal(err)
		}
		timed(b, func(ctx context.Context) error {
			l, err := c.TryAcquire(ctx, "bench/client", leasehold.TTL(10*time.Second))
			if err != nil {
				return err
			}
			return l.Release(ctx)
		})
	})
}

// handoff runs waiters that take turns: each acquires, notes how long
// after the previous holder began to release it got the lock, and
// releases, until b.N turns have been taken.
func handoff(b *testing.B, waiters int, mk func(i int) (lock, unlock func(ctx context.Context) error)) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	type w struct {
		lock, unlock func(ctx context.Context) error
	}
	ws := make([]w, waiters)
	for i := range ws {
		ws[i].lock, ws[i].unlock = mk(i)
	}
	var mu sync.Mutex
	var lat []time.Duration
	var turns int
	var releasing time.Time
	var firstErr error
	var wg sync.WaitGroup
	b.ResetTimer()
	for _, x := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if err := x.lock(ctx); err != nil {
					mu.Lock()
					firstErr = cmp(firstErr, err)
					mu.Unlock()
					cancel()
					return
				}
				at := time.Now()
				mu.Lock()
				if !releasing.IsZero() {
					lat = append(lat, at.Sub(releasing))
				}
				turns++
				done := turns > b.N
				releasing = time.Now()
				mu.Unlock()
				if err := x.unlock(ctx); err != nil {
					mu.Lock()
					firstErr = cmp(firstErr, err)
					mu.Unlock()
					cancel()
					return
				}
				if done {
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if firstErr != nil && len(lat) < b.N {
		b.Fatal(firstErr)
	}
	percentiles(b, lat, "µs")
}

func cmp(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func BenchmarkHandoff(b *testing.B) {
	const waiters = 8
	u := freshURL(b, enginetest.EtcdURL(b))
	base := open(b, u)
	defer base.Close()
	b.Run(fmt.Sprintf("mutex/%d", waiters), func(b *testing.B) {
		handoff(b, waiters, func(int) (lock, unlock func(ctx context.Context) error) {
			return mutexLocker(b, newClient(b, base), base.Prefix()+"mutex/handoff")
		})
	})
	b.Run(fmt.Sprintf("store/%d", waiters), func(b *testing.B) {
		handoff(b, waiters, func(i int) (lock, unlock func(ctx context.Context) error) {
			s := open(b, u)
			b.Cleanup(func() { s.Close() })
			c, err := leasehold.New(s, leasehold.WithOwner(fmt.Sprintf("w%d", i)))
			if err != nil {
				b.Fatal(err)
			}
			var l *leasehold.Lease
			return func(ctx context.Context) (err error) {
					l, err = c.Acquire(ctx, "bench/handoff", leasehold.TTL(10*time.Second))
					return err
				}, func(ctx context.Context) error {
					return l.Release(ctx)
				}
		})
	})
}
