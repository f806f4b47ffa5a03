package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/postgres"
	"github.com/leasehold/leasehold/testrig/enginetest"
	"github.com/leasehold/leasehold/testrig/latency"
)

// Run with:
//
//	eval "$(scripts/engines.sh start)"
//	go test -run '^$' -bench . -benchtime 3000x ./postgres/
//
// Each sub-benchmark of BenchmarkAcquireRelease reports the median and p99
// of one acquire+release pair beside ns/op. "store" calls the Store,
// "client" goes through Client.TryAcquire and Lease.Release, and "raw" is
// the reference: a bare conditional INSERT ... ON CONFLICT DO UPDATE that
// takes a free or expired lock and an owner-checked DELETE, on a pgxpool of
// the same server. BenchmarkAcquireReleaseParallel reports pairs/s with 32
// goroutines on distinct names, and adds "raw+notify": the raw pair with a
// pg_notify in the DELETE statement, as Release has.
// BenchmarkAcquireReleaseInterleaved alternates raw and store pairs in one
// loop and reports both medians and their ratio.

type pairFunc func(ctx context.Context) error

func benchPairs(b *testing.B, pair pairFunc) {
	ctx := context.Background()
	for i := 0; i < 50; i++ { // warm the pool and its statement caches
		if err := pair(ctx); err != nil {
			b.Fatal(err)
		}
	}
	latency.Measure(b, 0, pair)
}

func benchStore(b *testing.B, base string, params ...string) leasehold.Store {
	u := withParam(base, "table", freshTable(b, base, "lh_bench_"))
	for i := 0; i+1 < len(params); i += 2 {
		u = withParam(u, params[i], params[i+1])
	}
	s := open(b, u)
	b.Cleanup(func() { s.Close() })
	return s
}

func storePair(s leasehold.Store, name string) pairFunc {
	return func(ctx context.Context) error {
		rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: name, Owner: "me", TTL: 10 * time.Second})
		if err != nil {
			return err
		}
		return s.Release(ctx, name, "me", rec.Token)
	}
}

// rawTable creates the reference's table.
func rawTable(b *testing.B, pool *pgxpool.Pool, base string) string {
	table := freshTable(b, base, "lh_bench_raw_")
	if _, err := pool.Exec(context.Background(), `CREATE TABLE `+table+
		` (name text PRIMARY KEY, owner text NOT NULL, expires_at timestamptz NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	return table
}

// rawPair is the reference pair.
func rawPair(pool *pgxpool.Pool, table, name string) pairFunc {
	return rawPairNotify(pool, table, name, false)
}

// rawPairNotify is the reference pair, with a pg_notify in the DELETE's
// statement when notify is set (what Release does), to show its cost.
func rawPairNotify(pool *pgxpool.Pool, table, name string, notify bool) pairFunc {
	insert := `INSERT INTO ` + table + ` AS l (name, owner, expires_at) VALUES ($1, $2, now() + interval '10 seconds')
		ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
		WHERE l.expires_at < now()`
	del := `DELETE FROM ` + table + ` WHERE name = $1 AND owner = $2`
	if notify {
		del = `WITH d AS (` + del + ` RETURNING name) SELECT pg_notify('lh_bench', name) FROM d`
	}
	return func(ctx context.Context) error {
		tag, err := pool.Exec(ctx, insert, name, "me")
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("raw lock %q not taken", name)
		}
		_, err = pool.Exec(ctx, del, name, "me")
		return err
	}
}

func benchPool(b *testing.B, base string, maxConns int) *pgxpool.Pool {
	pool, err := pgxpool.New(context.Background(), withParam(base, "pool_max_conns", fmt.Sprint(maxConns)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	return pool
}

func BenchmarkAcquireRelease(b *testing.B) {
	base := enginetest.PostgresURL(b)
	b.Run("raw", func(b *testing.B) {
		pool := benchPool(b, base, 4)
		benchPairs(b, rawPair(pool, rawTable(b, pool, base), "bench/lock"))
	})
	b.Run("store", func(b *testing.B) { benchPairs(b, storePair(benchStore(b, base), "bench/lock")) })
	b.Run("client", func(b *testing.B) {
		c, err := leasehold.New(benchStore(b, base), leasehold.WithOwner("me"))
		if err != nil {
			b.Fatal(err)
		}
		benchPairs(b, func(ctx context.Context) error {
			l, err := c.TryAcquire(ctx, "bench/lock", leasehold.TTL(10*time.Second))
			if err != nil {
				return err
			}
			return l.Release(ctx)
		})
	})
}

// BenchmarkAcquireReleaseInterleaved alternates a raw pair and a store pair
// in one loop, so both see the same load: on a shared, noisy machine the
// ratio of their medians is steadier than figures taken one after another.
func BenchmarkAcquireReleaseInterleaved(b *testing.B) {
	base := enginetest.PostgresURL(b)
	pool := benchPool(b, base, 4)
	raw, store := rawPair(pool, rawTable(b, pool, base), "bench/lock"), storePair(benchStore(b, base), "bench/lock")
	benchInterleaved(b, raw, store, "raw", "store", "store/raw")
}

func BenchmarkAcquireReleaseParallel(b *testing.B) {
	base := enginetest.PostgresURL(b)
	run := func(b *testing.B, pair func(name string) pairFunc) {
		var id atomic.Int64
		b.SetParallelism(16) // 2 cores × 16 = 32 goroutines
		b.RunParallel(func(pb *testing.PB) {
			p := pair(fmt.Sprintf("bench/p%d", id.Add(1)))
			for pb.Next() {
				if err := p(context.Background()); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
	}
	b.Run("raw", func(b *testing.B) {
		pool := benchPool(b, base, 32)
		table := rawTable(b, pool, base)
		run(b, func(name string) pairFunc { return rawPair(pool, table, name) })
	})
	b.Run("raw+notify", func(b *testing.B) {
		pool := benchPool(b, base, 32)
		table := rawTable(b, pool, base)
		run(b, func(name string) pairFunc { return rawPairNotify(pool, table, name, true) })
	})
	b.Run("store", func(b *testing.B) {
		s := benchStore(b, base, "pool_max_conns", "32")
		run(b, func(name string) pairFunc { return storePair(s, name) })
	})
}

// BenchmarkTxn: one records transaction (a condition on one key, a put of
// it and an add to a counter), median and p99; one round trip since
// schema version 2 (four before).
func BenchmarkTxn(b *testing.B) {
	base := enginetest.PostgresURL(b)
	s := benchStore(b, base)
	benchPairs(b, txnOp(s.(leasehold.RecordStore).Txn, "bench/a", "bench/n"))
}

// txnOp is one records transaction by txn: a condition on key (at the
// version the last one left it), a put of it and an add to counter.
func txnOp(txn func(context.Context, leasehold.Txn) (leasehold.TxnResult, error), key, counter string) pairFunc {
	var v uint64
	return func(ctx context.Context) error {
		res, err := txn(ctx, leasehold.Txn{
			If:   []leasehold.Condition{{Key: key, Version: v}},
			Then: []leasehold.Write{{Key: key, Value: []byte("x")}, {Key: counter, Add: 1}},
		})
		v = res.Versions[key]
		return err
	}
}

// BenchmarkTxnInterleaved alternates Txn (one round trip) and the four
// round trips Txn took before schema version 2, on two keys each, and
// reports both medians and their ratio.
func BenchmarkTxnInterleaved(b *testing.B) {
	base := enginetest.PostgresURL(b)
	s := benchStore(b, base).(*postgres.Store)
	inTx := func(ctx context.Context, txn leasehold.Txn) (leasehold.TxnResult, error) {
		return postgres.TxnInTx(ctx, s, txn)
	}
	benchInterleaved(b, txnOp(s.Txn, "bench/a", "bench/n"), txnOp(inTx, "bench/b", "bench/m"), "txn", "4-trips", "before/after")
}

// benchInterleaved runs first and second alternately in one loop (which
// of them goes first alternates too), after 50 of each to warm up, so that
// both see the same load. It reports the median of each in µs, as
// <firstName>-p50-µs and <secondName>-p50-µs, and second's over first's
// as ratioName.
func benchInterleaved(b *testing.B, first, second pairFunc, firstName, secondName, ratioName string) {
	ops := [2]pairFunc{first, second}
	ctx := context.Background()
	lat := [2][]time.Duration{}
	for i := 0; i < 50; i++ {
		for _, op := range ops {
			if err := op(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k := range ops {
			k = (k + i) % 2 // alternate which goes first
			t0 := time.Now()
			if err := ops[k](ctx); err != nil {
				b.Fatal(err)
			}
			lat[k] = append(lat[k], time.Since(t0))
		}
	}
	b.StopTimer()
	var p50 [2]float64
	for k := range lat {
		slices.Sort(lat[k])
		p50[k] = float64(lat[k][len(lat[k])/2].Nanoseconds()) / 1e3
	}
	b.ReportMetric(p50[0], firstName+"-p50-µs")
	b.ReportMetric(p50[1], secondName+"-p50-µs")
	b.ReportMetric(p50[1]/p50[0], ratioName)
}
