package cli

import (
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/internal/serverbench"
)

func newBenchCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure leasehold against a reference engine on this machine",
		Long: `Bench measures leasehold side by side with a reference on this machine, in
one run, and prints medians and p99s next to each other. Pick what to
measure:

  leasehold bench server     the lease server against Redis (pairs/s, latency, handoff)
  leasehold bench workflow   workflow strategies against three common baselines

Timings depend on the machine and its load: compare figures from one run.
Without a subcommand bench prints this help and exits 64.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cmd.SetOut(e.stderr)
			_ = cmd.Help()
			return usagef("bench: missing subcommand")
		},
	}
	cfg := serverbench.Config{}
	srv := &cobra.Command{
		Use:   "server [flags]",
		Short: "Measure the lease server side by side with Redis",
		Long: `Measure the lease server side by side with Redis, in one run on this machine.

An engine with a durable, group-committed log (and one without fsync) is
started in this process with its RESP listener on a loopback port; 32
clients share pipelined connections to it. Redis is the reference: SET NX PX
and a compare-and-delete script through go-redis, at whatever persistence
the Redis server has (run it with --save "" --appendonly no for the usual
"no persistence" figure). Rounds are interleaved so that noise hits every
implementation alike. Reported: acquire+release pairs/s (median of the
rounds), pair latency p50/p99, handoff latency to queued waiters (from just
before the holder's release to the next waiter holding; Redis waiters poll
every millisecond), the cost of one fdatasync on the data directory's disk,
and with --leases N the engine's memory per held lease and restart time
(and Redis's used_memory per lock key).

Timings depend on the machine and its load: compare the rows of one run,
not figures from different runs.`,
		Example: `  leasehold bench server --redis redis://127.0.0.1:6379
  leasehold bench server --redis redis://127.0.0.1:6379 --leases 1000000`,
		Args: cobra.NoArgs,
		RunE: wrapRun(func(cmd *cobra.Command, args []string) error {
			if cfg.RedisURL == "" {
				cfg.RedisURL = os.Getenv("LEASEHOLD_TEST_REDIS")
			}
			cfg.Out = cmd.OutOrStdout()
			return serverbench.Run(cmd.Context(), cfg)
		}),
	}
	f := srv.Flags()
	f.StringVar(&cfg.RedisURL, "redis", "", "Redis URL of the reference (default $LEASEHOLD_TEST_REDIS; empty: no reference)")
	f.IntVar(&cfg.Clients, "clients", 32, "concurrent clients for the pairs figure")
	f.DurationVar(&cfg.Duration, "duration", 3*time.Second, "length of each round per implementation")
	f.IntVar(&cfg.Rounds, "rounds", 3, "interleaved rounds")
	f.IntVar(&cfg.Waiters, "waiters", 8, "queued waiters for the handoff figure")
	f.IntVar(&cfg.Handoffs, "handoffs", 2000, "handoffs to measure")
	f.IntVar(&cfg.Leases, "leases", 0, "also hold this many leases to measure memory and restart time (e.g. 1000000)")
	f.StringVar(&cfg.Dir, "dir", "", "data directory for the server's log (default: a temporary directory on the default temp disk)")
	cmd.AddCommand(srv)
	cmd.AddCommand(newBenchWorkflowCmd(e))
	return cmd
}
