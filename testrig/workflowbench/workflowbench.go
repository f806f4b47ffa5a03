// Package workflowbench is the workflow experiment of source document 004,
// run side by side in one process: 100 workers on one workflow instance,
// every strategy of package workflow on every engine at hand, and the
// document's own three strategies (ported as it describes them) as
// baselines on PostgreSQL and Redis. It backs the bench module's workflow
// suite (`cd bench && go run . workflow`) and the workflow package's
// benchmark.
//
// Two workloads:
//
//   - advance: Workers workers released together, each performing PerWorker
//     transitions n → n+1 of one instance: it reads n, asks for n → n+1,
//     and when told the instance has moved on (refused, or already done by
//     another request) it takes the state it was told and asks again, until
//     its own transition is applied or the strategy's budget runs out. A
//     transition's latency runs from the read to the end.
//   - approve: Rounds rounds of Workers workers all asking PENDING →
//     APPROVED of a fresh instance at once: one must apply, and every other
//     caller should be told who did.
//
// After each run it checks that nothing was lost or applied twice: the
// instance's version, history and final state against the applied count.
package workflowbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/leasehold/leasehold"
)

// Config says what to run.
type Config struct {
	// PostgresURL is the PostgreSQL to run on. Empty: start a private one
	// with fsync on (when its programs are found; "off" skips PostgreSQL).
	PostgresURL string
	// AllowNoFsync runs on a PostgreSQL whose fsync is off (otherwise
	// refused: the experiment is defined with fsync on).
	AllowNoFsync bool
	// RedisURL is the Redis to run on (empty: none; the Redis-lock baseline
	// needs it and PostgreSQL).
	RedisURL string
	// Dir holds the SQLite database and the private PostgreSQL (default:
	// new directories under the system's temporary directory). As root the
	// private PostgreSQL runs as the postgres user, who must be able to
	// enter Dir.
	Dir string
	// Engines limits the engines (memory, sqlite, postgres, redis; default
	// all available).
	Engines []string
	// Systems, when set, runs only the systems whose name contains one of
	// these strings.
	Systems []string
	// Workloads: advance, approve (default both).
	Workloads []string
	Workers   int // default 100
	PerWorker int // advance: transitions per worker (default 20)
	Rounds    int // approve: rounds (default 50)
	Pool      int // PostgreSQL connections per pool (default 20, as in the document's runs)
	// Give up on one transition after this long (default 60s).
	TransitionTimeout time.Duration
	// Plot, when set, is where the latency CDFs are written (PNG).
	Plot string
	Out  io.Writer
	// Progress, when set, receives a line per finished run.
	Progress io.Writer
}

func (c *Config) defaults() {
	if c.Workers <= 0 {
		c.Workers = 100
	}
	if c.PerWorker <= 0 {
		c.PerWorker = 20
	}
	if c.Rounds <= 0 {
		c.Rounds = 50
	}
	if c.Pool <= 0 {
		c.Pool = 20
	}
	if c.TransitionTimeout <= 0 {
		c.TransitionTimeout = 60 * time.Second
	}
	if len(c.Workloads) == 0 {
		c.Workloads = []string{"advance", "approve"}
	}
	if c.Out == nil {
		c.Out = os.Stdout
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
}

// kind classifies what one transition call told its caller.
type kind int

const (
	kApplied     kind = iota // it applied the transition
	kAlreadyDone             // honestly: another request did (named)
	kClaimed                 // said success, but applied nothing (the document's "idempotent" success)
	kWrongState              // refused: the instance is elsewhere
	kExhausted               // the strategy's budget ran out (retries, lock wait, lock not acquired)
	kError
	nKinds
)

var kindNames = [nKinds]string{"applied", "already-done", "told success, not applied", "wrong-state", "exhausted", "errors"}

type reply struct {
	kind  kind
	state string // the state the caller was told the instance is in ("" if not told)
	by    string // kAlreadyDone: the request that applied it
	err   error
}

// system is one implementation under test.
type system struct {
	name     string
	engine   string // where the workflow's data lives
	baseline bool
	history  bool // keeps a history to check
	create   func(ctx context.Context, wl, instance, state string) error
	read     func(ctx context.Context, wl, instance string) (string, error)
	call     func(ctx context.Context, wl string, worker int, instance, from, to, actor, req string) reply
	check    func(ctx context.Context, wl, instance string) (state string, version uint64, history int, err error)
}

// Row is one system's figures on one workload.
type Row struct {
	System, Engine, Workload string
	Baseline                 bool
	Intended                 int // transitions wanted (advance) or calls made (approve)
	Rounds                   int // approve
	Calls                    int // Transition calls, re-asks included
	Counts                   [nKinds]int
	Told                     int // approve: already-done replies that named the request that applied
	Elapsed                  time.Duration
	Latency                  []time.Duration // sorted
	Check                    string          // "ok" or what disagrees
}

// AppliedPerSec is applied transitions per second of the run.
func (r Row) AppliedPerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Counts[kApplied]) / r.Elapsed.Seconds()
}

// Success is the share of intended transitions applied (advance), or of
// calls that applied or were told who did (approve).
func (r Row) Success() float64 {
	if r.Intended == 0 {
		return 0
	}
	if r.Workload == "approve" {
		return float64(r.Counts[kApplied]+r.Told) / float64(r.Intended)
	}
	return float64(r.Counts[kApplied]) / float64(r.Intended)
}

// Applied returns the count of applied transitions.
func (r Row) Applied() int { return r.Counts[kApplied] }

// Pct returns the p-th percentile latency.
func (r Row) Pct(p float64) time.Duration {
	if len(r.Latency) == 0 {
		return 0
	}
	i := int(float64(len(r.Latency)) * p / 100)
	return r.Latency[min(i, len(r.Latency)-1)]
}

// Avg returns the mean latency.
func (r Row) Avg() time.Duration {
	if len(r.Latency) == 0 {
		return 0
	}
	var s time.Duration
	for _, d := range r.Latency {
		s += d
	}
	return s / time.Duration(len(r.Latency))
}

// Result is a whole run.
type Result struct {
	Rows   []Row
	Header []string // what ran where
}

// Run runs the experiment, prints its Markdown tables to cfg.Out and
// writes the plot.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg.defaults()
	runID = newRunID()
	env, err := openEngines(ctx, &cfg)
	if err != nil {
		return nil, err
	}
	defer env.close()
	res := &Result{Header: env.header}
	for _, h := range env.header {
		fmt.Fprintln(cfg.Out, h)
	}
	fmt.Fprintln(cfg.Out)
	systems := env.systems(&cfg)
	if len(systems) == 0 {
		return nil, errors.New("no system to run")
	}
	for _, wl := range cfg.Workloads {
		var rows []Row
		for _, s := range systems {
			var row Row
			var err error
			switch wl {
			case "advance":
				row, err = advance(ctx, &cfg, s)
			case "approve":
				row, err = approve(ctx, &cfg, s)
			default:
				return nil, &leasehold.InvalidError{Field: "workload", Reason: fmt.Sprintf("%q is not advance or approve", wl)}
			}
			if err != nil {
				return nil, fmt.Errorf("%s %s on %s: %w", wl, s.name, s.engine, err)
			}
			fmt.Fprintf(cfg.Progress, "%s %-44s %-10s %7.0f applied/s  p99 %-9s  success %5.1f %%  %s\n", wl, s.name, s.engine,
				row.AppliedPerSec(), fmtDur(row.Pct(99)), 100*row.Success(), row.Check)
			rows = append(rows, row)
		}
		res.Rows = append(res.Rows, rows...)
		writeTable(cfg.Out, &cfg, wl, rows)
	}
	if g := Goal(res.Rows); g != "" {
		fmt.Fprintln(cfg.Out, g)
	}
	if cfg.Plot != "" {
		if err := plotCDF(cfg.Plot, res.Rows); err != nil {
			return res, fmt.Errorf("plot: %w", err)
		}
		fmt.Fprintf(cfg.Out, "\nlatency CDFs written to %s\n", filepath.Base(cfg.Plot))
	}
	return res, nil
}

// runID keeps the names of one run apart from earlier runs on the same
// engines. Run sets it anew each time: a process that runs the experiment
// twice (go test -count 5) created the document's rows of its first run
// again and failed on their primary key. Runs are not concurrent.
var runID string

func newRunID() string { return strconv.FormatInt(time.Now().UnixNano()%1e12, 36) }
