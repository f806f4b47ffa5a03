package server

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// BenchmarkPermitAcquireRelease: one of 8 permits (4 held by others)
// taken and released, by the engine's AcquirePermit (one call under the
// engine's lock) and, as the reference, by permitLoop (a List and a try of
// each free permit, what the HTTP handler did before). It reports the
// median and p99 of one acquire and release.
func BenchmarkPermitAcquireRelease(b *testing.B) {
	for _, how := range []string{"engine", "loop"} {
		b.Run(how, func(b *testing.B) {
			e, err := OpenEngine(EngineConfig{})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			ctx := context.Background()
			take := func(owner string) (string, uint64) {
				req := pxReq("", owner, time.Minute)
				acquire := e.AcquirePermit
				if how == "loop" {
					acquire = func(ctx context.Context, sem string, n int, req AcquireRequest) (leasehold.Record, error) {
						return permitLoop(ctx, e, sem, n, req)
					}
				}
				rec, err := acquire(ctx, "bench", 8, req)
				if err != nil {
					b.Fatal(err)
				}
				return rec.Name, rec.Token
			}
			for range 4 {
				take("other")
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				name, token := take("me")
				if err := e.Release(ctx, name, "me", token); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2]), "p50-ns")
			b.ReportMetric(float64(lat[len(lat)*99/100]), "p99-ns")
		})
	}
}
