package workflow_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/testrig/latency"
	"github.com/leasehold/leasehold/testrig/workflowbench"
	"github.com/leasehold/leasehold/workflow"
)

// BenchmarkTransition: one writer, no contention, per strategy, on the
// memory store (the cost of the package itself).
func BenchmarkTransition(b *testing.B) {
	for _, s := range strategies {
		b.Run(string(s), func(b *testing.B) {
			m := memory.New()
			w, err := workflow.New(counting(unique("bench"), 1<<16), workflow.Config{Records: m, Leases: m, Strategy: s})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			n := 0
			inst := "i"
			if _, err := w.Create(ctx, inst); err != nil {
				b.Fatal(err)
			}
			latency.Measure(b, 0, func(ctx context.Context) error {
				if n == 1<<16 {
					inst, n = fmt.Sprint("i", inst), 0
					if _, err := w.Create(ctx, inst); err != nil {
						return err
					}
				}
				_, err := w.Transition(ctx, inst, strconv.Itoa(n), strconv.Itoa(n+1), "a", fmt.Sprint(inst, "-", n))
				n++
				return err
			})
		})
	}
}

// BenchmarkExperiment runs the experiment of docs/workflows.md (advance:
// 100 workers × 20 transitions n → n+1 on one instance) once per
// iteration and reports each system's applied/s and p50/p99 per
// transition. Engines: $WFBENCH_ENGINES (default memory; postgres needs
// $WFBENCH_POSTGRES or starts a private server with fsync on, redis needs
// $LEASEHOLD_TEST_REDIS); systems: $WFBENCH_SYSTEMS (substrings, default
// all). For the full table and plot use the bench module: `cd bench && go
// run . workflow`.
func BenchmarkExperiment(b *testing.B) {
	cfg := workflowbench.Config{
		Workloads:         []string{"advance"},
		Engines:           strings.Split(envOr("WFBENCH_ENGINES", "memory"), ","),
		PostgresURL:       os.Getenv("WFBENCH_POSTGRES"),
		RedisURL:          os.Getenv("LEASEHOLD_TEST_REDIS"),
		TransitionTimeout: time.Minute,
		Out:               &bytes.Buffer{},
	}
	if v := os.Getenv("WFBENCH_SYSTEMS"); v != "" {
		cfg.Systems = strings.Split(v, ",")
	}
	for b.Loop() {
		res, err := workflowbench.Run(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range res.Rows {
			name := strings.NewReplacer(" ", "", ":", "", "(", "", ")", "", ",", "").Replace(r.Engine + "/" + r.System)
			b.ReportMetric(r.AppliedPerSec(), name+"-applied/s")
			b.ReportMetric(float64(r.Pct(50).Microseconds()), name+"-p50-µs")
			b.ReportMetric(float64(r.Pct(99).Microseconds()), name+"-p99-µs")
			if r.Check != "ok" && !r.Baseline {
				b.Errorf("%s: %s", name, r.Check)
			}
		}
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
