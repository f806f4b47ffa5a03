// Package latency measures and reports the latency distributions of the
// project's benchmarks: medians and p99 beside ns/op.
package latency

import (
	"context"
	"slices"
	"testing"
	"time"
)

// Percentile returns the p-th percentile (0-100) of sorted.
func Percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)*p/100, len(sorted)-1)]
}

// Report sorts lat and reports its median and p99 in microseconds, as
// metrics named PREFIX + "p50-µs" and PREFIX + "p99-µs".
func Report(b *testing.B, lat []time.Duration, prefix string) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(Percentile(lat, 50).Nanoseconds())/1e3, prefix+"p50-µs")
	b.ReportMetric(float64(Percentile(lat, 99).Nanoseconds())/1e3, prefix+"p99-µs")
}

// Measure runs op warmup times untimed, then b.N times timed, each call on
// its own clock, and reports the distribution with Report.
func Measure(b *testing.B, warmup int, op func(ctx context.Context) error) {
	ctx := context.Background()
	for i := 0; i < warmup; i++ {
		if err := op(ctx); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := op(ctx); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	Report(b, lat, "")
}
