package leasehold_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"

	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/sqlite"
	"github.com/leasehold/leasehold/testrig/latency"
)

// Run with:
//
//	go test -run '^$' -bench AcquireRelease -benchtime 3000x .
//
// Each sub-benchmark reports the median and p99 of one acquire+release pair
// beside ns/op. "store" calls the Store directly; "client" goes through
// Client.TryAcquire and Lease.Release (which also starts and stops the
// keepalive goroutine); "raw" is the reference: the engine's bare primitive
// pair on the same kind of storage (for SQLite, a conditional upsert and an
// owner-checked delete on a file with the same pragmas).

type pairFunc = func(ctx context.Context) error

func benchPairs(b *testing.B, pair pairFunc) { latency.Measure(b, 0, pair) }

func storePair(s leasehold.Store) pairFunc {
	return func(ctx context.Context) error {
		rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "bench/lock", Owner: "me", TTL: 10 * time.Second})
		if err != nil {
			return err
		}
		return s.Release(ctx, "bench/lock", "me", rec.Token)
	}
}

func clientPair(b *testing.B, s leasehold.Store) pairFunc {
	c, err := leasehold.New(s, leasehold.WithOwner("me"))
	if err != nil {
		b.Fatal(err)
	}
	return func(ctx context.Context) error {
		l, err := c.TryAcquire(ctx, "bench/lock", leasehold.TTL(10*time.Second))
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	b.Run("memory/store", func(b *testing.B) { benchPairs(b, storePair(memory.New())) })
	b.Run("memory/client", func(b *testing.B) { benchPairs(b, clientPair(b, memory.New())) })
	b.Run("sqlite/raw", func(b *testing.B) { benchPairs(b, rawSQLitePair(b)) })
	b.Run("sqlite/store", func(b *testing.B) { benchPairs(b, storePair(openSQLite(b))) })
	b.Run("sqlite/client", func(b *testing.B) { benchPairs(b, clientPair(b, openSQLite(b))) })
}

// BenchmarkAcquireReleaseParallel measures pairs/s with 32 goroutines on
// distinct names.
func BenchmarkAcquireReleaseParallel(b *testing.B) {
	for _, tc := range []struct {
		name string
		open func(b *testing.B) leasehold.Store
	}{
		{"memory", func(*testing.B) leasehold.Store { return memory.New() }},
		{"sqlite", func(b *testing.B) leasehold.Store { return openSQLite(b) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s := tc.open(b)
			b.SetParallelism(16) // 2 cores × 16 = 32 goroutines
			var id int64
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				n := fmt.Sprintf("bench/p%d", time.Now().UnixNano()+id)
				id++
				for pb.Next() {
					rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: n, Owner: "me", TTL: 10 * time.Second})
					if err == nil {
						err = s.Release(ctx, n, "me", rec.Token)
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
		})
	}
}

func openSQLite(b *testing.B) *sqlite.Store {
	s, err := sqlite.Open(filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// rawSQLitePair is the reference: one conditional upsert that takes a free
// or expired lock, and one owner-checked delete, each its own transaction,
// on a file with the store's pragmas (WAL, synchronous=FULL).
func rawSQLitePair(b *testing.B) pairFunc {
	p := filepath.Join(b.TempDir(), "raw.db")
	db, err := sql.Open("sqlite", "file:"+p+"?_pragma=busy_timeout(30000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`CREATE TABLE locks (name TEXT PRIMARY KEY, owner TEXT NOT NULL, expires INTEGER NOT NULL) WITHOUT ROWID`); err != nil {
		b.Fatal(err)
	}
	return func(ctx context.Context) error {
		now := time.Now().UnixNano()
		res, err := db.ExecContext(ctx, `INSERT INTO locks(name, owner, expires) VALUES (?, ?, ?)
			ON CONFLICT(name) DO UPDATE SET owner = excluded.owner, expires = excluded.expires
			WHERE locks.expires < ?`, "bench/lock", "me", now+int64(10*time.Second), now)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return fmt.Errorf("raw lock not taken")
		}
		_, err = db.ExecContext(ctx, `DELETE FROM locks WHERE name = ? AND owner = ?`, "bench/lock", "me")
		return err
	}
}
