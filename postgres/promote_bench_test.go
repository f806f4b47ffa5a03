//go:build unix

package postgres_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/testrig/latency"
	"github.com/leasehold/leasehold/testrig/pgreplica"
)

// BenchmarkSyncReplica measures what a promotion that loses nothing costs:
// an acquire+release pair on a primary with a streaming replica that is
// its synchronous standby (synchronous_standby_names = '*'), through three
// Stores that differ only in synchronous_commit, interleaved in one loop so
// that all see the same load:
//
//   - local: the commit waits for the primary's own WAL flush only, as with
//     an asynchronous replica (the default deployment: a promotion may lose
//     the last grants);
//   - on: it also waits until the standby has flushed the commit's WAL (a
//     promotion of that standby loses nothing);
//   - remote_apply: until the standby has replayed it (also visible to
//     reads on the standby).
//
// It reports each one's median and p99 in µs and the medians' ratios to
// local's. Run with:
//
//	go test -run '^$' -bench SyncReplica -benchtime 3000x ./postgres/
func BenchmarkSyncReplica(b *testing.B) {
	set := pgreplica.Start(b, pgreplica.WithSetting("synchronous_standby_names=*"))
	base := set.Primary().URL()
	names := []string{"local", "on", "remote_apply"}
	ops := make([]pairFunc, len(names))
	for i, mode := range names {
		ops[i] = storePair(benchStore(b, base, "synchronous_commit", mode), "bench/"+mode)
	}
	set.CatchUp()
	ctx := context.Background()
	for range 50 {
		for _, op := range ops {
			if err := op(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	lat := make([][]time.Duration, len(ops))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k := range ops {
			k = (k + i) % len(ops) // rotate which goes first
			t0 := time.Now()
			if err := ops[k](ctx); err != nil {
				b.Fatal(err)
			}
			lat[k] = append(lat[k], time.Since(t0))
		}
	}
	b.StopTimer()
	p50 := make([]float64, len(ops))
	for k, name := range names {
		slices.Sort(lat[k])
		p50[k] = float64(latency.Percentile(lat[k], 50).Nanoseconds()) / 1e3
		b.ReportMetric(p50[k], name+"-p50-µs")
		b.ReportMetric(float64(latency.Percentile(lat[k], 99).Nanoseconds())/1e3, name+"-p99-µs")
		if k > 0 {
			b.ReportMetric(p50[k]/p50[0], name+"/local")
		}
	}
}
