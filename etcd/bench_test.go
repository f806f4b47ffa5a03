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
	"github.com/leasehold/leasehold/testrig/enginetest"
	"github.com/leasehold/leasehold/testrig/latency"
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
//
// BenchmarkHandoff has 8 waiters, each with a connection (and store) of
// its own, take turns on one lock, and reports the time from the holder
// starting to release to the next waiter holding it.
//
// On a shared, noisy machine the time between two sub-benchmarks changes
// the figures more than the code does, so BenchmarkVersusMutex measures
// both in alternating blocks of turns (pairs, then handoffs) and reports
// the p50 and p99 of each side and the store/mutex ratio of the medians.

// timed measures pair after 20 untimed calls that warm up connections and
// spare leases.
func timed(b *testing.B, pair func(ctx context.Context) error) { latency.Measure(b, 20, pair) }

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

// benchStore opens a store on a key prefix of its own in the shared etcd,
// closed when the benchmark ends; it returns the prefix's URL too.
func benchStore(b *testing.B) (string, *etcd.Store) {
	b.Helper()
	u := freshURL(b, enginetest.EtcdURL(b))
	s := open(b, u)
	b.Cleanup(func() { s.Close() })
	return u, s
}

func BenchmarkAcquireRelease(b *testing.B) {
	_, s := benchStore(b)
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

type locker struct {
	lock, unlock func(ctx context.Context) error
}

// handoff has the waiters take turns: each acquires, notes how long after
// the previous holder began to release it got the lock, and releases,
// until turns turns have been taken. It returns the handoff times.
func handoff(ctx context.Context, ws []locker, turns int) ([]time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var lat []time.Duration
	var taken int
	var releasing time.Time
	var firstErr error
	var wg sync.WaitGroup
	fail := func(err error) { // the first error ends the run
		mu.Lock()
		firstErr = cmp(firstErr, err)
		mu.Unlock()
		cancel()
	}
	for _, x := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if err := x.lock(ctx); err != nil {
					fail(err)
					return
				}
				at := time.Now()
				mu.Lock()
				if !releasing.IsZero() {
					lat = append(lat, at.Sub(releasing))
				}
				taken++
				done := taken > turns
				releasing = time.Now()
				mu.Unlock()
				if err := x.unlock(ctx); err != nil {
					fail(err)
					return
				}
				if done {
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(lat) < turns {
		return lat, firstErr
	}
	return lat, nil
}

func cmp(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

const handoffWaiters = 8

func mutexWaiters(b testing.TB, s *etcd.Store, key string) []locker {
	ws := make([]locker, handoffWaiters)
	for i := range ws {
		ws[i].lock, ws[i].unlock = mutexLocker(b, newClient(b, s), key)
	}
	return ws
}

// storeWaiters are Clients, each on a store of its own, that wait with
// Client.Acquire (woken by the store's Watch) and release with
// Lease.Release.
func storeWaiters(b testing.TB, u, name string) []locker {
	ws := make([]locker, handoffWaiters)
	for i := range ws {
		s := open(b, u)
		b.Cleanup(func() { s.Close() })
		c, err := leasehold.New(s, leasehold.WithOwner(fmt.Sprintf("w%d", i)))
		if err != nil {
			b.Fatal(err)
		}
		var l *leasehold.Lease
		ws[i].lock = func(ctx context.Context) (err error) {
			l, err = c.Acquire(ctx, name, leasehold.TTL(10*time.Second))
			return err
		}
		ws[i].unlock = func(ctx context.Context) error { return l.Release(ctx) }
	}
	return ws
}

func BenchmarkHandoff(b *testing.B) {
	u, base := benchStore(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	run := func(b *testing.B, ws []locker) {
		b.ResetTimer()
		lat, err := handoff(ctx, ws, b.N)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		latency.Report(b, lat, "")
	}
	b.Run(fmt.Sprintf("mutex/%d", handoffWaiters), func(b *testing.B) {
		run(b, mutexWaiters(b, base, base.Prefix()+"mutex/handoff"))
	})
	b.Run(fmt.Sprintf("store/%d", handoffWaiters), func(b *testing.B) {
		run(b, storeWaiters(b, u, "bench/handoff"))
	})
}

// BenchmarkVersusMutex alternates blocks of the mutex and the store, so
// that both meet the same load on a shared machine: b.N pairs and b.N/2
// handoffs on each side, in blocks of 100 pairs (after 10 uncounted ones)
// and of 50 handoffs.
func BenchmarkVersusMutex(b *testing.B) {
	u, s := benchStore(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	report := func(b *testing.B, what string, m, st []time.Duration) {
		slices.Sort(m)
		slices.Sort(st)
		p := func(l []time.Duration, q int) float64 { return float64(l[len(l)*q/100].Nanoseconds()) / 1e3 }
		b.ReportMetric(p(m, 50), what+"-mutex-p50-µs")
		b.ReportMetric(p(m, 99), what+"-mutex-p99-µs")
		b.ReportMetric(p(st, 50), what+"-store-p50-µs")
		b.ReportMetric(p(st, 99), what+"-store-p99-µs")
		b.ReportMetric(p(st, 50)/p(m, 50), what+"-p50-ratio")
	}
	b.Run("pair", func(b *testing.B) {
		lock, unlock := mutexLocker(b, newClient(b, s), s.Prefix()+"mutex/versus")
		mutex := func(ctx context.Context) error {
			if err := lock(ctx); err != nil {
				return err
			}
			return unlock(ctx)
		}
		store := func(ctx context.Context) error {
			rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "bench/versus", Owner: "me", TTL: 10 * time.Second})
			if err != nil {
				return err
			}
			return s.Release(ctx, "bench/versus", "me", rec.Token)
		}
		var m, st []time.Duration
		for i := 0; i < blocks(b); i++ {
			for _, side := range []struct {
				pair func(context.Context) error
				lat  *[]time.Duration
			}{{mutex, &m}, {store, &st}} {
				for j := 0; j < 110; j++ {
					t0 := time.Now()
					if err := side.pair(ctx); err != nil {
						b.Fatal(err)
					}
					if j >= 10 {
						*side.lat = append(*side.lat, time.Since(t0))
					}
				}
			}
		}
		report(b, "pair", m, st)
	})
	b.Run("handoff", func(b *testing.B) {
		mw, sw := mutexWaiters(b, s, s.Prefix()+"mutex/versus-handoff"), storeWaiters(b, u, "bench/versus-handoff")
		var m, st []time.Duration
		for i := 0; i < blocks(b); i++ {
			lm, err := handoff(ctx, mw, 50)
			if err != nil {
				b.Fatal(err)
			}
			ls, err := handoff(ctx, sw, 50)
			if err != nil {
				b.Fatal(err)
			}
			m, st = append(m, lm...), append(st, ls...)
		}
		report(b, "handoff", m, st)
	})
}

func blocks(b *testing.B) int { return max(1, (b.N+99)/100) }
