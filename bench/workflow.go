package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/leasehold/leasehold/testrig/workflowbench"
)

// The workflow suite: every strategy of package workflow beside three
// hand-written baselines.

type workflowConfig struct {
	workflowbench.Config
	engines, systems, workloads string
}

func workflowFlags(fs *flag.FlagSet) *workflowConfig {
	c := &workflowConfig{}
	fs.StringVar(&c.PostgresURL, "postgres", "", `PostgreSQL URL (default: start a private server with fsync on, as the postgres user when root; "off": no PostgreSQL)`)
	fs.BoolVar(&c.AllowNoFsync, "allow-no-fsync", false, "run on a PostgreSQL whose fsync is off")
	fs.StringVar(&c.RedisURL, "redis", os.Getenv("LEASEHOLD_TEST_REDIS"), `Redis URL (default $LEASEHOLD_TEST_REDIS; "off": no Redis)`)
	fs.StringVar(&c.engines, "engines", "", "comma-separated engines to run on: memory, sqlite, postgres, redis (default: all at hand)")
	fs.StringVar(&c.systems, "only", "", "comma-separated: run only the strategies whose name contains one of these")
	fs.StringVar(&c.workloads, "workload", "", "comma-separated workloads: advance, approve (default both)")
	fs.IntVar(&c.Workers, "workers", 100, "concurrent workers")
	fs.IntVar(&c.PerWorker, "transitions", 20, "advance: transitions per worker")
	fs.IntVar(&c.Rounds, "rounds", 50, "approve: rounds")
	fs.IntVar(&c.Pool, "pool", 20, "PostgreSQL connections per pool")
	fs.DurationVar(&c.TransitionTimeout, "give-up", 60*time.Second, "give up on one transition after this long")
	fs.StringVar(&c.Dir, "dir", "", "directory for the SQLite file and the private PostgreSQL (default: the system's temporary directory)")
	fs.StringVar(&c.Plot, "plot", "", "write the latency CDFs (PNG) here")
	return c
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// smokeEngines are the engines a smoke run of the workflow suite must run
// on: the baselines need PostgreSQL and Redis.
var smokeEngines = []string{"memory", "sqlite", "postgres", "redis"}

func runWorkflow(ctx context.Context, c *workflowConfig, smoke bool, out, progress io.Writer) error {
	cfg := c.Config
	cfg.Engines, cfg.Systems, cfg.Workloads = split(c.engines), split(c.systems), split(c.workloads)
	if cfg.RedisURL == "off" {
		cfg.RedisURL = ""
	}
	if smoke {
		if cfg.RedisURL == "" {
			return errors.New("no Redis: the smoke run needs it for the Redis-lock baseline")
		}
		if cfg.PostgresURL == "off" {
			return errors.New("no PostgreSQL: the smoke run needs it for the baselines")
		}
		cfg.Engines, cfg.Systems, cfg.Workloads = smokeEngines, nil, nil
		cfg.Workers, cfg.PerWorker, cfg.Rounds = 10, 2, 2
		if cfg.Plot == "" {
			dir, err := os.MkdirTemp("", "leasehold-bench-plot-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			cfg.Plot = filepath.Join(dir, "cdf.png")
		}
	}
	cfg.Out, cfg.Progress = out, progress
	res, err := workflowbench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	faults := res.Faults()
	if smoke {
		for _, e := range smokeEngines {
			if !slices.ContainsFunc(res.Rows, func(r workflowbench.Row) bool { return r.Engine == e && !r.Baseline }) {
				faults = append(faults, "no leasehold strategy ran on "+e)
			}
		}
		if n := res.Baselines(); n < 3 {
			faults = append(faults, fmt.Sprintf("%d baselines ran (want at least 3)", n))
		}
	}
	if len(faults) > 0 {
		return fmt.Errorf("%d fault(s):\n  %s", len(faults), strings.Join(faults, "\n  "))
	}
	return nil
}
