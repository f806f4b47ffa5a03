package serverbench

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/server"
)

// BenchmarkPairs runs the pairs measure of the server suite (32 clients on
// two pipelined RESP connections, server and client in this process) for
// -benchtime's worth of seconds, durable and without fsync, so that it can
// be profiled: go test -run '^$' -bench Pairs -benchtime 1x -cpuprofile cpu.out
// ./bench/serverbench/ (LEASEHOLD_BENCH_SECONDS, default 3). Beside
// pairs/s and the group commits it reports, from the same run, the pair's
// p50 as the client sees it, the p50 of the engine's Acquire and Release
// calls (from the RESP server's call into the engine to their return:
// the group commit they wait for and the engine's lock, without the
// connection and the client), and one 4 KiB write + fdatasync in the same
// directory measured just before, so that each can be put as a multiple
// of one fsync.
func BenchmarkPairs(b *testing.B) {
	for _, noSync := range []bool{false, true} {
		name := "durable"
		if noSync {
			name = "nosync"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			var syncs, recs, busy atomic.Int64
			var cmu sync.Mutex
			var commits []time.Duration
			dir := b.TempDir()
			fsync, err := measureFsync(dir, 300)
			if err != nil {
				b.Fatal(err)
			}
			timed := &timedBackend{}
			open := func() (server.Backend, error) {
				e, err := server.OpenEngine(server.EngineConfig{Dir: filepath.Join(dir, "log"), NoSync: noSync, LogSyncs: logSyncs(),
					Hooks: server.Hooks{Sync: func(d time.Duration, n int) {
						syncs.Add(1)
						recs.Add(int64(n))
						busy.Add(int64(d))
						cmu.Lock()
						commits = append(commits, d)
						cmu.Unlock()
					}}})
				timed.Backend = e
				return timed, err
			}
			l, err := serverLocker(ctx, name, open, 32)
			if err != nil {
				b.Fatal(err)
			}
			defer l.close()
			f := runPairs(b, l, fsync, timed.reset)
			acq, rel := timed.sorted()
			b.ReportMetric(float64(pct(acq, 50))/f, "engine-acquire-p50/fsync")
			b.ReportMetric(float64(pct(rel, 50))/f, "engine-release-p50/fsync")
			if n := syncs.Load(); n > 0 {
				b.ReportMetric(float64(recs.Load())/float64(n), "records/commit")
				b.ReportMetric(float64(busy.Load())/float64(n)/1e3, "µs/commit")
				b.ReportMetric(float64(busy.Load())/float64(n)/f, "commit-mean/fsync")
				cmu.Lock()
				slices.Sort(commits)
				b.ReportMetric(float64(pct(commits, 50))/f, "commit-p50/fsync")
				cmu.Unlock()
				b.ReportMetric(float64(n)/float64(b.N)/pairsDuration().Seconds(), "commits/s")
			}
		})
	}
}

// timedBackend times the Acquire and Release calls of the backend it
// wraps.
type timedBackend struct {
	server.Backend
	mu       sync.Mutex
	acq, rel []time.Duration
}

func (t *timedBackend) Acquire(ctx context.Context, req server.AcquireRequest) (leasehold.Record, error) {
	t0 := time.Now()
	rec, err := t.Backend.Acquire(ctx, req)
	d := time.Since(t0)
	t.mu.Lock()
	t.acq = append(t.acq, d)
	t.mu.Unlock()
	return rec, err
}

func (t *timedBackend) Release(ctx context.Context, name, owner string, token uint64) error {
	t0 := time.Now()
	err := t.Backend.Release(ctx, name, owner, token)
	d := time.Since(t0)
	t.mu.Lock()
	t.rel = append(t.rel, d)
	t.mu.Unlock()
	return err
}

func (t *timedBackend) reset() {
	t.mu.Lock()
	t.acq, t.rel = nil, nil
	t.mu.Unlock()
}

func (t *timedBackend) sorted() (acq, rel []time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	acq, rel = slices.Clone(t.acq), slices.Clone(t.rel)
	slices.Sort(acq)
	slices.Sort(rel)
	return acq, rel
}

// BenchmarkPairsProcess is BenchmarkPairs/durable with the server in a
// process of its own (as the suite's second row and the Redis references
// run): pairs/s and the pair's p50 and p99 as multiples of one fsync.
func BenchmarkPairsProcess(b *testing.B) {
	dir := b.TempDir()
	fsync, err := measureFsync(dir, 300)
	if err != nil {
		b.Fatal(err)
	}
	l, err := processLocker("process", childConfig{dir: filepath.Join(dir, "log"), logSyncs: logSyncs()}, 32)
	if err != nil {
		b.Fatal(err)
	}
	defer l.close()
	runPairs(b, l, fsync, func() {})
}

// runPairs measures l's pairs (32 clients) b.N times, calling before
// ahead of each, and reports the last: pairs/s, one fsync's p50 (sorted
// fsync) and the pair's p50 and p99 as multiples of it, which it returns.
func runPairs(b *testing.B, l *locker, fsync []time.Duration, before func()) (fsyncP50 float64) {
	b.ResetTimer()
	var rate float64
	var lat []time.Duration
	for range b.N {
		before()
		r, l, err := measurePairs(context.Background(), l, 32, pairsDuration())
		if err != nil {
			b.Fatal(err)
		}
		rate, lat = r, l
	}
	slices.Sort(lat)
	f := float64(pct(fsync, 50))
	b.ReportMetric(rate, "pairs/s")
	b.ReportMetric(f/1e3, "fsync-p50-µs")
	b.ReportMetric(float64(pct(lat, 50))/f, "pair-p50/fsync")
	b.ReportMetric(float64(pct(lat, 99))/f, "pair-p99/fsync")
	return f
}

// TestMain lets the test binary be the server child of processLocker.
func TestMain(m *testing.M) {
	ServeChild()
	os.Exit(m.Run())
}

// pairsDuration is LEASEHOLD_BENCH_SECONDS (default 3) seconds.
func pairsDuration() time.Duration {
	if s, err := strconv.ParseFloat(os.Getenv("LEASEHOLD_BENCH_SECONDS"), 64); err == nil && s > 0 {
		return time.Duration(s * float64(time.Second))
	}
	return 3 * time.Second
}

// logSyncs is LEASEHOLD_BENCH_LOG_SYNCS (default 0: the engine's default).
func logSyncs() int {
	n, _ := strconv.Atoi(os.Getenv("LEASEHOLD_BENCH_LOG_SYNCS"))
	return n
}
