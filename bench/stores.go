package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The stores suite: leasehold's networked stores beside the raw engine
// primitives and peer libraries, on the same servers in one run.

// locker is one lock implementation under test.
type locker struct {
	name string
	// engine groups the implementations measured against each other
	// (set by runStores).
	engine string
	// try makes one attempt; ok is false when the lock is held.
	try func(ctx context.Context, key string) (unlock func(context.Context) error, ok bool, err error)
	// wait blocks until the lock is taken (the library's own waiting).
	wait func(ctx context.Context, key string) (unlock func(context.Context) error, err error)
	// waitArrive, if set, is wait for an in-process lock that knows the
	// moment a caller takes its place: it calls arrive then, under its own
	// lock, so that the same-key order measure stamps arrivals in the
	// lock's own order (the tests' locks). Without it a caller arrives
	// when it calls wait.
	waitArrive func(ctx context.Context, key string, arrive func()) (unlock func(context.Context) error, err error)
}

type storesConfig struct {
	sqlite, memory                  string
	redis, postgres, etcd, dynamodb string
	pairs, handoffs                 int
	waiters, clients                int
	duration                        time.Duration
	orderMargin                     time.Duration
	only                            string
}

func storesFlags(fs *flag.FlagSet) *storesConfig {
	c := &storesConfig{}
	fs.StringVar(&c.memory, "memory", "on", `the in-process memory store ("off": none)`)
	fs.StringVar(&c.sqlite, "sqlite", "", `directory for the SQLite files (default: a new temporary directory; "off": no SQLite)`)
	fs.StringVar(&c.redis, "redis", os.Getenv("LEASEHOLD_TEST_REDIS"), `Redis URL (default $LEASEHOLD_TEST_REDIS; "off": none)`)
	fs.StringVar(&c.postgres, "postgres", os.Getenv("LEASEHOLD_TEST_POSTGRES"), `PostgreSQL URL (default $LEASEHOLD_TEST_POSTGRES; "off": none)`)
	fs.StringVar(&c.etcd, "etcd", os.Getenv("LEASEHOLD_TEST_ETCD"), `etcd store URL, etcd://host:port (default $LEASEHOLD_TEST_ETCD; "off": none)`)
	fs.StringVar(&c.dynamodb, "dynamodb", os.Getenv("LEASEHOLD_TEST_DYNAMODB"), `DynamoDB store URL (default $LEASEHOLD_TEST_DYNAMODB; "off": none)`)
	fs.IntVar(&c.pairs, "pairs", 2000, "uncontended acquire+release pairs per implementation")
	fs.IntVar(&c.handoffs, "handoffs", 300, "handoffs measured per implementation")
	fs.IntVar(&c.waiters, "waiters", 8, "blocked waiters in the handoff measure")
	fs.IntVar(&c.clients, "clients", 32, "clients in the throughput measures")
	fs.DurationVar(&c.duration, "duration", 3*time.Second, "length of each throughput measure")
	fs.DurationVar(&c.orderMargin, "order-margin", 2*time.Millisecond, "same key: how much earlier than the grantee another still-waiting client must have called wait for the grant to count as overtaking it")
	fs.StringVar(&c.only, "only", "", "comma-separated implementation name prefixes to run (default all)")
	return c
}

func (c *storesConfig) smoke() {
	c.pairs, c.handoffs, c.waiters, c.clients, c.duration = 20, 10, 2, 4, 150*time.Millisecond
}

// runStores prints the table to out. Every engine given must be reachable,
// and every implementation selected must complete every measure; with
// smoke, every engine must be given.
func runStores(ctx context.Context, c *storesConfig, smoke bool, out io.Writer) error {
	defer closeAll()
	var lockers []locker
	if c.memory != "off" {
		ls, err := leaseholdLockers(ctx, "memory", "memory://")
		if err != nil {
			return fmt.Errorf("memory: %w", err)
		}
		lockers = append(lockers, ofEngine("memory", ls)...)
	}
	if c.sqlite != "off" {
		ls, done, err := sqliteLockers(ctx, c.sqlite)
		if err != nil {
			return fmt.Errorf("SQLite: %w", err)
		}
		defer done()
		lockers = append(lockers, ofEngine("SQLite", ls)...)
	}
	engines := []struct {
		name, url string
		open      func(context.Context, string) ([]locker, error)
	}{
		{"Redis", c.redis, redisLockers},
		{"PostgreSQL", c.postgres, postgresLockers},
		{"etcd", c.etcd, etcdLockers},
		{"DynamoDB", c.dynamodb, dynamoLockers},
	}
	for _, e := range engines {
		if e.url == "" || e.url == "off" {
			if smoke {
				return fmt.Errorf("no %s: the smoke run measures every engine and its references", e.name)
			}
			continue
		}
		ls, err := e.open(ctx, e.url)
		if err != nil {
			return fmt.Errorf("%s: %w", e.name, err)
		}
		lockers = append(lockers, ofEngine(e.name, ls)...)
	}
	if len(lockers) == 0 { // every engine is off
		return errors.New("no engine given (--memory, --sqlite, --redis, --postgres, --etcd, --dynamodb)")
	}
	fmt.Fprintf(out, "| implementation | uncontended pair p50 / p99 | handoff p50 / p99 (%d waiters) | %d clients, distinct keys | same key: handoffs/s (holder changes, grants in arrival order) |\n", c.waiters, c.clients)
	fmt.Fprintln(out, "| --- | --- | --- | --- | --- |")
	var failed []string
	lockers = slices.DeleteFunc(lockers, func(l locker) bool { return !selected(c.only, l.name) })
	pairs, pairErrs := measurePairs(ctx, c, lockers)
	for _, l := range lockers {
		row := []string{l.name, "—", "—", "—", "—"}
		var errs []error
		if l.try != nil {
			row[1] = pct(pairs[l.name])
			errs = append(errs, pairErrs[l.name])
			rate, err := measureDistinct(ctx, c, l)
			row[3] = fmt.Sprintf("%.0f/s", rate)
			errs = append(errs, err)
		}
		if l.wait != nil {
			d, err := measureHandoff(ctx, c, l)
			row[2] = pct(d)
			errs = append(errs, err)
			rate, changes, inOrder, err := measureSameKey(ctx, c, l)
			row[4] = fmt.Sprintf("%.0f/s (%.0f %%, %.0f %% in order)", rate, 100*changes, 100*inOrder)
			errs = append(errs, err)
		}
		fmt.Fprintln(out, "| "+strings.Join(row, " | ")+" |")
		if err := errors.Join(errs...); err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", l.name, err))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d implementation(s) did not complete:\n  %s", len(failed), strings.Join(failed, "\n  "))
	}
	return nil
}

// closers are what the suite opened, closed in reverse order at its end.
var closers []func()

// atEnd registers f to run when the suite ends.
func atEnd(f func()) { closers = append(closers, f) }

func closeAll() {
	for i := len(closers) - 1; i >= 0; i-- {
		closers[i]()
	}
	closers = nil
}

func selected(only, name string) bool {
	if only == "" {
		return true
	}
	for _, p := range strings.Split(only, ",") {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

var keySeq atomic.Int64

func freshKey(what string) string {
	return fmt.Sprintf("bench/%s/%d/%d", what, time.Now().UnixNano(), keySeq.Add(1))
}

func pct(d []time.Duration) string {
	if len(d) == 0 {
		return "no samples"
	}
	slices.Sort(d)
	return fmt.Sprintf("%s / %s", short(d[len(d)/2]), short(d[len(d)*99/100]))
}

func short(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%d µs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000)
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// ofEngine marks ls as implementations on engine.
func ofEngine(engine string, ls []locker) []locker {
	for i := range ls {
		ls[i].engine = engine
	}
	return ls
}

// measurePairs: one client, uncontended try+release of one key per
// implementation, the implementations of one engine interleaved: each
// round times one pair of each in an order shuffled anew (so that none
// always follows the same other one), so that all of them are measured
// under the same conditions of the machine. Measured one after another,
// they were not: in one such run the raw Redis pair, measured first, took
// 173 µs where redislock's, measured a little later, took 39 µs (why the
// first was slower was not measured). The first tenth of the rounds warms up
// connections and caches. An implementation that fails leaves the
// rotation with its error.
func measurePairs(ctx context.Context, c *storesConfig, lockers []locker) (map[string][]time.Duration, map[string]error) {
	out, errs := map[string][]time.Duration{}, map[string]error{}
	rng := rand.New(rand.NewPCG(1, 2))
	pair := func(l locker, key string, i int) error {
		t0 := time.Now()
		unlock, ok, err := l.try(ctx, key)
		switch {
		case err != nil:
			return fmt.Errorf("pair %d: %w", i, err)
		case !ok:
			return fmt.Errorf("pair %d: refused an uncontended key", i)
		}
		if err := unlock(ctx); err != nil {
			return fmt.Errorf("pair %d: release: %w", i, err)
		}
		if i >= 0 {
			out[l.name] = append(out[l.name], time.Since(t0))
		}
		return nil
	}
	for _, engine := range engineOrder(lockers) {
		type subject struct {
			l   locker
			key string
		}
		var live []subject
		for _, l := range lockers {
			if l.engine == engine && l.try != nil {
				live = append(live, subject{l, freshKey("pair")})
				out[l.name] = make([]time.Duration, 0, c.pairs)
			}
		}
		for i := -c.pairs / 10; i < c.pairs && len(live) > 0; i++ {
			rng.Shuffle(len(live), func(a, b int) { live[a], live[b] = live[b], live[a] })
			for _, s := range live {
				if err := pair(s.l, s.key, i); err != nil {
					errs[s.l.name] = err
				}
			}
			live = slices.DeleteFunc(live, func(s subject) bool { return errs[s.l.name] != nil })
		}
	}
	return out, errs
}

// engineOrder returns the engines of lockers in their first appearance's
// order.
func engineOrder(lockers []locker) []string {
	var out []string
	for _, l := range lockers {
		if !slices.Contains(out, l.engine) {
			out = append(out, l.engine)
		}
	}
	return out
}

// firstErr keeps the first error that several goroutines report.
type firstErr struct {
	mu  sync.Mutex
	err error
}

func (f *firstErr) set(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
}

func (f *firstErr) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// windowOver reports whether the measuring window of ctx has ended, so that
// an error of a call still in flight is the end of the measure, not a
// failure. ctx.Err() alone does not tell: the deadline travels with a call
// (gRPC sends it to etcd), and the engine's own timeout answer ("etcdserver:
// request timed out", "context deadline exceeded" in an Unknown status) can
// reach the caller before its context's timer has run, most often on a busy
// machine; so the clock decides too, with a millisecond of slack.
func windowOver(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	deadline, ok := ctx.Deadline()
	return ok && time.Until(deadline) < time.Millisecond
}

// engineTimeout reports whether err is an engine's or a client's timeout
// rather than a wrong answer: etcd answers "etcdserver: request timed out"
// when a proposal is not applied in time (on a loaded machine it can do so
// inside the window, before the caller's deadline), and a store turns a
// deadline it ran into into context.DeadlineExceeded. The distinct-keys
// measure counts such calls apart instead of failing: a smoke run checks
// that a suite still runs, and a timing is never a failure.
func engineTimeout(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "request timed out")
}

// measureHandoff: waiters+1 workers contend for one key; each holder works
// 500 µs, notes the time and releases, and joins the waiters again only once
// another worker holds the lock, so every handoff goes to a blocked waiter.
// The next holder records how long after the release call it got the lock.
func measureHandoff(ctx context.Context, c *storesConfig, l locker) ([]time.Duration, error) {
	key := freshKey("handoff")
	var mu sync.Mutex
	var out []time.Duration
	var relAt, gen atomic.Int64
	var failed firstErr
	start := time.Now()
	const limit = 2 * time.Minute
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var wg sync.WaitGroup
	for w := 0; w <= c.waiters; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				unlock, ok := waitTurn(ctx, l, key, "handoff", &failed, cancel)
				if !ok {
					return
				}
				got := time.Since(start)
				mine := gen.Add(1)
				if r := relAt.Load(); r > 0 {
					mu.Lock()
					out = append(out, got-time.Duration(r))
					if len(out) >= c.handoffs {
						cancel()
					}
					mu.Unlock()
				}
				time.Sleep(500 * time.Microsecond)
				relAt.Store(int64(time.Since(start)))
				if err := unlock(context.WithoutCancel(ctx)); err != nil && !windowOver(ctx) {
					failed.set(fmt.Errorf("handoff: release: %w", err))
					cancel()
				}
				for gen.Load() == mine && ctx.Err() == nil {
					time.Sleep(100 * time.Microsecond)
				}
			}
		}()
	}
	wg.Wait()
	if err := failed.get(); err != nil {
		return out, err
	}
	if len(out) < c.handoffs {
		return out, fmt.Errorf("handoff: %d of %d handoffs in %s", len(out), c.handoffs, limit)
	}
	return out, nil
}

// measureDistinct: clients try+release their own keys for the duration.
func measureDistinct(ctx context.Context, c *storesConfig, l locker) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, c.duration)
	defer cancel()
	var n, timeouts atomic.Int64
	var failed firstErr
	var wg sync.WaitGroup
	t0 := time.Now()
	defer func() {
		if k := timeouts.Load(); k > 0 {
			fmt.Fprintf(os.Stderr, "bench: %s: distinct keys: %d call(s) ended in the engine's own timeout inside the window (not counted)\n", l.name, k)
		}
	}()
	for range c.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := freshKey("distinct")
			for ctx.Err() == nil {
				unlock, ok, err := l.try(ctx, key)
				switch {
				case err == nil || windowOver(ctx):
				case engineTimeout(err):
					timeouts.Add(1)
				default:
					failed.set(fmt.Errorf("distinct keys: %w", err))
				}
				if err != nil || !ok {
					continue
				}
				if err := unlock(context.WithoutCancel(ctx)); err != nil {
					failed.set(fmt.Errorf("distinct keys: release: %w", err))
					continue
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	rate := float64(n.Load()) / time.Since(t0).Seconds()
	if err := failed.get(); err != nil {
		return rate, err
	}
	if n.Load() == 0 {
		return 0, errors.New("distinct keys: no pair completed")
	}
	return rate, nil
}

// measureSameKey: clients take turns on one key with the library's waiting
// and no work; returns handoffs/s, the share of grants that went to a
// different client than the previous one, and the share of grants made in
// arrival order (orderCheck: the order is checked, not assumed).
func measureSameKey(ctx context.Context, c *storesConfig, l locker) (rate, changes, inOrder float64, err error) {
	key := freshKey("same")
	ctx, cancel := context.WithTimeout(ctx, c.duration)
	defer cancel()
	order := newOrderCheck(c.orderMargin)
	var failed firstErr
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range c.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			arrive := func() { order.arrive(i, time.Now()) }
			mine := l
			if l.waitArrive != nil {
				mine.wait = func(ctx context.Context, key string) (func(context.Context) error, error) {
					return l.waitArrive(ctx, key, arrive)
				}
			}
			for ctx.Err() == nil {
				if l.waitArrive == nil {
					arrive()
				}
				unlock, ok := waitTurn(ctx, mine, key, "same key", &failed, nil)
				if !ok {
					order.leave(i)
					return
				}
				order.grant(i)
				if err := unlock(context.WithoutCancel(ctx)); err != nil {
					failed.set(fmt.Errorf("same key: release: %w", err))
				}
			}
		}()
	}
	wg.Wait()
	if err := failed.get(); err != nil {
		return 0, 0, 0, err
	}
	grants, changes, inOrder := order.result()
	if grants == 0 {
		return 0, 0, 0, errors.New("same key: no grant")
	}
	return float64(grants) / time.Since(t0).Seconds(), changes, inOrder, nil
}

// waitTurn takes key with l.wait for a benchmark worker. ok is false when
// the worker should stop: ctx ended, or the wait failed while ctx was live,
// which is recorded in failed (as "what: wait: ...") and, if onErr is not
// nil, calls it.
func waitTurn(ctx context.Context, l locker, key, what string, failed *firstErr, onErr func()) (unlock func(context.Context) error, ok bool) {
	unlock, err := l.wait(ctx, key)
	if err != nil {
		if !windowOver(ctx) {
			failed.set(fmt.Errorf("%s: wait: %w", what, err))
			if onErr != nil {
				onErr()
			}
		}
		return nil, false
	}
	return unlock, true
}

// pollWait turns a try into a blocking wait that polls every interval.
func pollWait(try func(context.Context, string) (func(context.Context) error, bool, error), every time.Duration) func(context.Context, string) (func(context.Context) error, error) {
	return func(ctx context.Context, key string) (func(context.Context) error, error) {
		for {
			unlock, ok, err := try(ctx, key)
			if err != nil || ok {
				return unlock, err
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(every):
			}
		}
	}
}
