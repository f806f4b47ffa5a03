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
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/postgres"
	"github.com/leasehold/leasehold/redis"
	"github.com/leasehold/leasehold/sqlite"
	"github.com/leasehold/leasehold/workflow"
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
// engines.
var runID = strconv.FormatInt(time.Now().UnixNano()%1e9, 36)

// advance runs the advance workload on s.
func advance(ctx context.Context, cfg *Config, s *system) (Row, error) {
	n := cfg.Workers * cfg.PerWorker
	wl := fmt.Sprintf("adv%s", runID)
	inst := instanceName(s)
	if err := s.create(ctx, wl, inst, "0"); err != nil {
		return Row{}, err
	}
	row := Row{System: s.name, Engine: s.engine, Workload: "advance", Baseline: s.baseline, Intended: n}
	var mu sync.Mutex
	lat := make([]time.Duration, 0, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	var fatal error
	for w := range cfg.Workers {
		wg.Go(func() {
			<-start
			for j := range cfg.PerWorker {
				req := fmt.Sprintf("w%d-%d", w, j)
				actor := fmt.Sprintf("worker-%d", w)
				t0 := time.Now()
				tctx, cancel := context.WithTimeout(ctx, cfg.TransitionTimeout)
				state, err := s.read(tctx, wl, inst)
				calls := 0
				var r reply
				for err == nil {
					cur, cerr := strconv.Atoi(state)
					if cerr != nil {
						err = fmt.Errorf("state %q is not a number", state)
						break
					}
					if cur >= n {
						r = reply{kind: kExhausted, err: errors.New("the instance reached the last state")}
						break
					}
					calls++
					r = s.call(tctx, wl, w, inst, strconv.Itoa(cur), strconv.Itoa(cur+1), actor, req)
					if (r.kind == kAlreadyDone || r.kind == kWrongState) && r.state != "" && tctx.Err() == nil {
						state = r.state // moved on: ask again from where it is
						continue
					}
					if tctx.Err() != nil && r.kind != kApplied {
						r = reply{kind: kExhausted, err: tctx.Err()}
					}
					break
				}
				cancel()
				d := time.Since(t0)
				mu.Lock()
				if err != nil {
					if fatal == nil {
						fatal = err
					}
					r.kind = kError
				}
				row.Counts[r.kind]++
				row.Calls += calls
				lat = append(lat, d)
				if r.kind == kError && r.err != nil && row.Check == "" {
					row.Check = "first error: " + r.err.Error()
				}
				mu.Unlock()
			}
		})
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	row.Elapsed = time.Since(t0)
	slices.Sort(lat)
	row.Latency = lat
	errNote := row.Check
	row.Check = verify(ctx, s, wl, inst, row.Counts[kApplied], strconv.Itoa(row.Counts[kApplied]))
	if errNote != "" {
		row.Check += "; " + errNote
	}
	return row, nil
}

// approve runs the approve workload on s.
func approve(ctx context.Context, cfg *Config, s *system) (Row, error) {
	wl := fmt.Sprintf("appr%s", runID)
	row := Row{System: s.name, Engine: s.engine, Workload: "approve", Baseline: s.baseline, Intended: cfg.Rounds * cfg.Workers, Rounds: cfg.Rounds}
	lat := make([]time.Duration, 0, row.Intended)
	var problems []string
	for round := range cfg.Rounds {
		inst := fmt.Sprintf("%s-r%d", instanceName(s), round)
		if err := s.create(ctx, wl, inst, "PENDING"); err != nil {
			return Row{}, err
		}
		replies := make([]reply, cfg.Workers)
		durs := make([]time.Duration, cfg.Workers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for w := range cfg.Workers {
			wg.Go(func() {
				<-start
				tctx, cancel := context.WithTimeout(ctx, cfg.TransitionTimeout)
				defer cancel()
				t0 := time.Now()
				replies[w] = s.call(tctx, wl, w, inst, "PENDING", "APPROVED", fmt.Sprintf("admin-%d", w), fmt.Sprintf("approve-%d-%d", round, w))
				durs[w] = time.Since(t0)
			})
		}
		t0 := time.Now()
		close(start)
		wg.Wait()
		row.Elapsed += time.Since(t0)
		lat = append(lat, durs...)
		row.Calls += cfg.Workers
		winner, applied := "", 0
		for w, r := range replies {
			row.Counts[r.kind]++
			if r.kind == kApplied {
				applied++
				winner = fmt.Sprintf("approve-%d-%d", round, w)
			}
			if r.kind == kError && len(problems) < 3 {
				problems = append(problems, fmt.Sprintf("round %d: %v", round, r.err))
			}
		}
		for _, r := range replies {
			if r.kind == kAlreadyDone && r.by == winner && applied == 1 {
				row.Told++
			}
		}
		if c := verify(ctx, s, wl, inst, applied, map[bool]string{true: "APPROVED", false: "PENDING"}[applied > 0]); c != "ok" {
			problems = append(problems, fmt.Sprintf("round %d: %s", round, c))
		} else if applied != 1 {
			problems = append(problems, fmt.Sprintf("round %d: %d applications", round, applied))
		}
	}
	slices.Sort(lat)
	row.Latency = lat
	row.Check = "ok"
	if len(problems) > 0 {
		if len(problems) > 3 {
			problems = append(problems[:3], fmt.Sprintf("and %d more", len(problems)-3))
		}
		row.Check = strings.Join(problems, "; ")
	}
	return row, nil
}

// verify compares the instance with what its callers were told.
func verify(ctx context.Context, s *system, wl, inst string, applied int, wantState string) string {
	state, version, hist, err := s.check(ctx, wl, inst)
	if err != nil {
		return "check failed: " + err.Error()
	}
	var bad []string
	if version != uint64(applied) {
		bad = append(bad, fmt.Sprintf("version %d but %d applied", version, applied))
	}
	if state != wantState {
		bad = append(bad, fmt.Sprintf("state %s but %d applied", state, applied))
	}
	if s.history && hist != applied {
		bad = append(bad, fmt.Sprintf("%d history entries but %d applied", hist, applied))
	}
	if len(bad) == 0 {
		return "ok"
	}
	return strings.Join(bad, ", ")
}

func instanceName(s *system) string {
	r := strings.NewReplacer(" ", "-", ":", "", "(", "", ")", "", "×", "x", ",", "", "/", "-")
	return r.Replace(s.engine + "-" + s.name)
}

// ---- engines and systems

type engines struct {
	header  []string
	memory  *memory.Store
	sqlite  *sqlite.Store
	pg      *postgres.Store
	pgPool  *pgxpool.Pool
	redis   *redis.Store
	rdb     *goredis.Client
	closers []func()
}

func (e *engines) close() {
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
}

func wants(cfg *Config, engine string) bool {
	return len(cfg.Engines) == 0 || slices.Contains(cfg.Engines, engine)
}

func openEngines(ctx context.Context, cfg *Config) (*engines, error) {
	e := &engines{}
	ok := false
	defer func() {
		if !ok {
			e.close()
		}
	}()
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "leasehold-wfbench-")
		if err != nil {
			return nil, err
		}
		e.closers = append(e.closers, func() { os.RemoveAll(d) })
		dir = d
	}
	if wants(cfg, "memory") {
		e.memory = memory.New()
		e.header = append(e.header, "- memory: the in-process store")
	}
	if wants(cfg, "sqlite") {
		path := filepath.Join(dir, "wfbench-"+runID+".db")
		s, err := sqlite.Open(path)
		if err != nil {
			return nil, fmt.Errorf("sqlite: %w", err)
		}
		e.closers = append(e.closers, func() { s.Close(); os.Remove(path); os.Remove(path + "-wal"); os.Remove(path + "-shm") })
		e.sqlite = s
		e.header = append(e.header, "- sqlite: the embedded store, a file in the bench directory")
	}
	if wants(cfg, "postgres") && cfg.PostgresURL != "off" {
		url := cfg.PostgresURL
		how := "given"
		if url == "" {
			p, err := startPostgres(ctx, cfg.Dir)
			if err != nil {
				if len(cfg.Engines) > 0 {
					return nil, err
				}
				e.header = append(e.header, "- postgres: skipped ("+err.Error()+")")
			} else {
				e.closers = append(e.closers, p.Stop)
				url, how = p.URL, "private server started for this run"
			}
		}
		if url != "" {
			withPool := url + sep(url) + "pool_max_conns=" + strconv.Itoa(cfg.Pool)
			pool, err := pgxpool.New(ctx, withPool)
			if err != nil {
				return nil, fmt.Errorf("postgres: %w", err)
			}
			e.closers = append(e.closers, pool.Close)
			var fsync, fpw, sc, version string
			if err := pool.QueryRow(ctx, "SELECT current_setting('fsync'), current_setting('full_page_writes'), current_setting('synchronous_commit'), current_setting('server_version')").Scan(&fsync, &fpw, &sc, &version); err != nil {
				return nil, fmt.Errorf("postgres: %w", err)
			}
			if fsync != "on" && !cfg.AllowNoFsync {
				return nil, fmt.Errorf("postgres: fsync is %s on %s; the experiment is defined with fsync on (start one with fsync on, leave --postgres empty to have one started, or allow it explicitly)", fsync, how)
			}
			if err := docSchema(ctx, pool); err != nil {
				return nil, fmt.Errorf("postgres: %w", err)
			}
			e.pgPool = pool
			s, err := postgres.Open(ctx, withPool)
			if err != nil {
				return nil, fmt.Errorf("postgres: %w", err)
			}
			e.closers = append(e.closers, func() { s.Close() })
			e.pg = s
			e.header = append(e.header, fmt.Sprintf("- postgres: PostgreSQL %s (%s), fsync=%s, full_page_writes=%s, synchronous_commit=%s; %d connections per pool (leasehold's store, and the document's code)",
				version, how, fsync, fpw, sc, cfg.Pool))
		}
	}
	if wants(cfg, "redis") && cfg.RedisURL != "" {
		s, err := redis.Open(ctx, cfg.RedisURL)
		if err != nil {
			return nil, fmt.Errorf("redis: %w", err)
		}
		e.closers = append(e.closers, func() { s.Close() })
		e.redis = s
		o, err := goredis.ParseURL(cfg.RedisURL)
		if err != nil {
			return nil, fmt.Errorf("redis: %w", err)
		}
		e.rdb = goredis.NewClient(o)
		e.closers = append(e.closers, func() { e.rdb.Close() })
		info, _ := e.rdb.Info(ctx, "server", "persistence").Result()
		e.header = append(e.header, "- redis: Redis "+infoField(info, "redis_version")+", appendonly="+
			map[string]string{"0": "no", "1": "yes"}[infoField(info, "aof_enabled")]+" (leasehold's store; the document's lock)")
	}
	ok = true
	return e, nil
}

func sep(url string) string {
	if strings.Contains(url, "?") {
		return "&"
	}
	return "?"
}

func infoField(info, name string) string {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), name+":"); ok {
			return v
		}
	}
	return "?"
}

// systems lists what runs, PostgreSQL first, baselines beside ours.
func (e *engines) systems(cfg *Config) []*system {
	var out []*system
	add := func(s *system) {
		if s == nil {
			return
		}
		if len(cfg.Systems) > 0 && !slices.ContainsFunc(cfg.Systems, func(x string) bool { return strings.Contains(s.name, x) }) {
			return
		}
		out = append(out, s)
	}
	ours := func(engine string, st leasehold.Store) {
		rs, ok := st.(leasehold.RecordStore)
		if !ok {
			return
		}
		for _, strat := range []workflow.Strategy{workflow.Optimistic, workflow.Pessimistic, workflow.Lease, workflow.Adaptive} {
			add(oursSystem(cfg, engine, rs, st, strat, 1))
		}
		if engine == "postgres" || engine == "redis" {
			add(oursSystem(cfg, engine, rs, st, workflow.Adaptive, 4))
		}
	}
	if e.pg != nil {
		pool := e.pgPool
		add(docSystem("doc: optimistic (FOR UPDATE)", pool, func(ctx context.Context, id, from, to, actor string) docResult {
			return docOptimistic(ctx, pool, id, from, to, actor)
		}))
		add(docSystem("doc: pessimistic NOWAIT", pool, func(ctx context.Context, id, from, to, actor string) docResult {
			return docPessimistic(ctx, pool, id, from, to)
		}))
		if e.rdb != nil {
			d := &docRedisLock{rdb: e.rdb, pool: pool}
			add(docSystem("doc: Redis lock", pool, d.transition))
		}
		add(docSystem("doc: pessimistic as printed (no transaction)", pool, func(ctx context.Context, id, from, to, actor string) docResult {
			return docPessimisticAsPrinted(ctx, pool, id, from, to)
		}))
		ours("postgres", e.pg)
	}
	if e.redis != nil {
		ours("redis", e.redis)
	}
	if e.sqlite != nil {
		ours("sqlite", e.sqlite)
	}
	if e.memory != nil {
		ours("memory", e.memory)
	}
	return out
}

// docSystem wraps one of the document's strategies.
func docSystem(name string, pool *pgxpool.Pool, fn func(ctx context.Context, id, from, to, actor string) docResult) *system {
	id := func(wl, inst string) string { return wl + "/" + inst }
	return &system{
		name: name, engine: "postgres", baseline: true,
		create: func(ctx context.Context, wl, inst, state string) error {
			return docCreate(ctx, pool, id(wl, inst), state)
		},
		read: func(ctx context.Context, wl, inst string) (string, error) { return docRead(ctx, pool, id(wl, inst)) },
		call: func(ctx context.Context, wl string, _ int, inst, from, to, actor, _ string) reply {
			r := fn(ctx, id(wl, inst), from, to, actor)
			switch {
			case r.success && r.idempotent:
				return reply{kind: kClaimed, state: r.current}
			case r.success:
				return reply{kind: kApplied, state: r.current}
			case r.lockFailed:
				return reply{kind: kExhausted, err: errors.New(r.err)}
			case r.current != "":
				return reply{kind: kWrongState, state: r.current}
			}
			return reply{kind: kError, err: errors.New(r.err)}
		},
		check: func(ctx context.Context, wl, inst string) (string, uint64, int, error) {
			s, v, err := docCheck(ctx, pool, id(wl, inst))
			return s, v, -1, err
		},
	}
}

// oursSystem runs package workflow with one strategy; procs > 1 gives the
// workers procs separate Workflows (as procs processes would have) on the
// same stores.
func oursSystem(cfg *Config, engine string, rs leasehold.RecordStore, leases leasehold.Store, strat workflow.Strategy, procs int) *system {
	name := string(strat)
	if procs > 1 {
		name = fmt.Sprintf("%s, %d processes", strat, procs)
	}
	var mu sync.Mutex
	wfs := map[string][]*workflow.Workflows{}
	get := func(wl string) ([]*workflow.Workflows, error) {
		mu.Lock()
		defer mu.Unlock()
		if ws := wfs[wl]; ws != nil {
			return ws, nil
		}
		def := approvalDef(wl)
		if strings.HasPrefix(wl, "adv") {
			def = countingDef(wl, cfg.Workers*cfg.PerWorker)
		}
		var ws []*workflow.Workflows
		for p := range procs {
			w, err := workflow.New(def, workflow.Config{
				Records: rs, Leases: leases, Strategy: strat, Owner: fmt.Sprintf("wfbench-%d", p),
			})
			if err != nil {
				return nil, err
			}
			ws = append(ws, w)
		}
		wfs[wl] = ws
		return ws, nil
	}
	return &system{
		name: name, engine: engine, history: true,
		create: func(ctx context.Context, wl, inst, state string) error {
			ws, err := get(wl)
			if err != nil {
				return err
			}
			_, err = ws[0].Create(ctx, inst)
			return err
		},
		read: func(ctx context.Context, wl, inst string) (string, error) {
			ws, err := get(wl)
			if err != nil {
				return "", err
			}
			in, err := ws[0].Get(ctx, inst)
			return in.State, err
		},
		call: func(ctx context.Context, wl string, worker int, inst, from, to, actor, req string) reply {
			ws, err := get(wl)
			if err != nil {
				return reply{kind: kError, err: err}
			}
			r, err := ws[worker%len(ws)].Transition(ctx, inst, from, to, actor, req)
			var wse *workflow.WrongStateError
			var ex *leasehold.RetriesExhaustedError
			switch {
			case err == nil && r.Outcome == workflow.Applied:
				return reply{kind: kApplied, state: r.State}
			case err == nil && r.Outcome == workflow.AlreadyDone:
				return reply{kind: kAlreadyDone, state: r.State, by: r.Entry.RequestID}
			case err == nil:
				return reply{kind: kError, err: fmt.Errorf("unexpected outcome %s", r.Outcome)}
			case errors.As(err, &wse):
				return reply{kind: kWrongState, state: wse.Current}
			case errors.As(err, &ex), errors.Is(err, leasehold.ErrLockTimeout):
				return reply{kind: kExhausted, err: err}
			}
			return reply{kind: kError, err: err}
		},
		check: func(ctx context.Context, wl, inst string) (string, uint64, int, error) {
			ws, err := get(wl)
			if err != nil {
				return "", 0, 0, err
			}
			in, err := ws[0].Get(ctx, inst)
			if err != nil {
				return "", 0, 0, err
			}
			h, err := ws[0].History(ctx, inst)
			return in.State, in.Version, len(h), err
		},
	}
}

func approvalDef(name string) workflow.Definition {
	return workflow.Definition{Name: name, Initial: "PENDING", Transitions: map[string][]string{
		"PENDING": {"APPROVED", "REJECTED"},
	}}
}

// countingDef is "0" → "1" → ... → "n".
func countingDef(name string, n int) workflow.Definition {
	tr := make(map[string][]string, n)
	for i := range n {
		tr[strconv.Itoa(i)] = []string{strconv.Itoa(i + 1)}
	}
	return workflow.Definition{Name: name, Initial: "0", Transitions: tr}
}
