package serverbench

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/server"
)

// BenchmarkPairs runs the pairs measure of the server suite (32 clients on
// two pipelined RESP connections, server and client in this process) for
// -benchtime's worth of seconds, durable and without fsync, so that it can
// be profiled: go test -run '^$' -bench Pairs -benchtime 1x -cpuprofile cpu.out
// ./bench/serverbench/ (LEASEHOLD_BENCH_SECONDS, default 3).
func BenchmarkPairs(b *testing.B) {
	for _, noSync := range []bool{false, true} {
		name := "durable"
		if noSync {
			name = "nosync"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			var syncs, recs, busy atomic.Int64
			open := func() (server.Backend, error) {
				return server.OpenEngine(server.EngineConfig{Dir: filepath.Join(b.TempDir(), "log"), NoSync: noSync, LogSyncs: logSyncs(),
					Hooks: server.Hooks{Sync: func(d time.Duration, n int) {
						syncs.Add(1)
						recs.Add(int64(n))
						busy.Add(int64(d))
					}}})
			}
			l, err := serverLocker(ctx, name, open, 32)
			if err != nil {
				b.Fatal(err)
			}
			defer l.close()
			b.ResetTimer()
			var rate float64
			for range b.N {
				r, _, err := measurePairs(ctx, l, 32, pairsDuration())
				if err != nil {
					b.Fatal(err)
				}
				rate = r
			}
			b.ReportMetric(rate, "pairs/s")
			if n := syncs.Load(); n > 0 {
				b.ReportMetric(float64(recs.Load())/float64(n), "records/commit")
				b.ReportMetric(float64(busy.Load())/float64(n)/1e3, "µs/commit")
				b.ReportMetric(float64(n)/float64(b.N)/pairsDuration().Seconds(), "commits/s")
			}
		})
	}
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
