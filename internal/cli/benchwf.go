package cli

import (
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/internal/workflowbench"
)

func newBenchWorkflowCmd(e *env) *cobra.Command {
	cfg := workflowbench.Config{}
	cmd := &cobra.Command{
		Use:   "workflow [flags]",
		Short: "Run the 100-worker workflow experiment: every strategy beside three common baselines",
		Long: `Run the workflow experiment in one process: 100 workers on one workflow
instance, every strategy of package workflow (optimistic, pessimistic,
lease, adaptive) on every engine at hand, and three common hand-written
strategies as baselines: an "optimistic" lock that takes FOR UPDATE, a
pessimistic FOR UPDATE NOWAIT, and a Redis SET NX lock with 3 tries 100ms
apart, on PostgreSQL (and Redis for the lock).

Two workloads: advance (each worker performs 20 transitions n → n+1,
reading n first and asking again from the state it is told whenever the
instance moved on) and approve (50 rounds of 100 workers asking PENDING →
APPROVED of a fresh instance at once). Reported per strategy: applied
transitions/s, latency per transition (avg, p50, p99, retries and waits
included), success rate, outcome counts, and a check that no transition
was lost or applied twice.

PostgreSQL runs with fsync on: without --postgres a private server is
started (from $LEASEHOLD_TEST_PG_BIN or /usr/lib/postgresql/*/bin) and
removed afterwards; a given server with fsync off is refused unless
--allow-no-fsync. Timings depend on the machine and its load: compare the
rows of one run.`,
		Example: `  leasehold bench workflow --redis redis://127.0.0.1:6379 --plot docs/workflows-latency.png
  leasehold bench workflow --engines memory,sqlite --workload advance`,
		Args: cobra.NoArgs,
		RunE: wrapRun(func(cmd *cobra.Command, args []string) error {
			if cfg.RedisURL == "" {
				cfg.RedisURL = os.Getenv("LEASEHOLD_TEST_REDIS")
			}
			cfg.Out = cmd.OutOrStdout()
			cfg.Progress = cmd.ErrOrStderr()
			_, err := workflowbench.Run(cmd.Context(), cfg)
			return err
		}),
	}
	f := cmd.Flags()
	f.StringVar(&cfg.PostgresURL, "postgres", "", `PostgreSQL URL (default: start a private server with fsync on; "off": no PostgreSQL)`)
	f.BoolVar(&cfg.AllowNoFsync, "allow-no-fsync", false, "run on a PostgreSQL whose fsync is off")
	f.StringVar(&cfg.RedisURL, "redis", "", "Redis URL (default $LEASEHOLD_TEST_REDIS; empty: no Redis)")
	f.StringSliceVar(&cfg.Engines, "engines", nil, "engines to run on: memory, sqlite, postgres, redis (default: all at hand)")
	f.StringSliceVar(&cfg.Systems, "only", nil, "run only the strategies whose name contains one of these")
	f.StringSliceVar(&cfg.Workloads, "workload", nil, "workloads: advance, approve (default both)")
	f.IntVar(&cfg.Workers, "workers", 100, "concurrent workers")
	f.IntVar(&cfg.PerWorker, "transitions", 20, "advance: transitions per worker")
	f.IntVar(&cfg.Rounds, "rounds", 50, "approve: rounds")
	f.IntVar(&cfg.Pool, "pool", 20, "PostgreSQL connections per pool")
	f.DurationVar(&cfg.TransitionTimeout, "give-up", 60*time.Second, "give up on one transition after this long")
	f.StringVar(&cfg.Dir, "dir", "", "directory for the SQLite file and the private PostgreSQL (default: a temporary directory)")
	f.StringVar(&cfg.Plot, "plot", "", "write the latency CDFs (PNG) here")
	return cmd
}
