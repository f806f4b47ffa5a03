package workflowbench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/postgres"
	"github.com/leasehold/leasehold/redis"
	"github.com/leasehold/leasehold/sqlite"
	"github.com/leasehold/leasehold/workflow"
)

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
