// Package serverbench measures the lease server side by side with Redis in
// one run: acquire+release pairs per second with many clients, handoff
// latency to queued waiters, memory per held lease and restart time. It
// backs the bench module's server suite (`cd bench && go run . server`).
package serverbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/remote"
	"github.com/leasehold/leasehold/server"
	"github.com/leasehold/leasehold/sqlite"
)

// Config says what to measure.
type Config struct {
	RedisURL string // the reference; empty skips it
	// RedisServer, if set, is a redis-server binary the suite starts with
	// appendonly yes and appendfsync always in the data directory: the
	// durable reference, beside RedisURL's (run without persistence).
	RedisServer string
	Clients     int           // concurrent clients for the pairs figure (default 32)
	Duration    time.Duration // per round and implementation (default 3s)
	Rounds      int           // interleaved rounds (default 3)
	Waiters     int           // queued waiters for the handoff figure (default 8)
	Handoffs    int           // handoffs measured (default 2000)
	Leases      int           // held leases for the memory/restart figure (0 skips it)
	Queue       int           // waiters queued on one name for the queue figure (0 skips it)
	Dir         string        // where the server keeps its log (default: a temp dir)
	// LogSyncs, if not 0, adds a row: the durable server with this many
	// group commits syncing at once (EngineConfig.LogSyncs), beside the
	// default.
	LogSyncs int
	Out      io.Writer
}

func (c *Config) defaults() {
	if c.Clients <= 0 {
		c.Clients = 32
	}
	if c.Duration <= 0 {
		c.Duration = 3 * time.Second
	}
	if c.Rounds <= 0 {
		c.Rounds = 3
	}
	if c.Waiters <= 0 {
		c.Waiters = 8
	}
	if c.Handoffs <= 0 {
		c.Handoffs = 2000
	}
	if c.Out == nil {
		c.Out = os.Stdout
	}
}

// locker is one implementation under test.
type locker struct {
	name    string
	pair    func(ctx context.Context, client int) error          // acquire + release, uncontended
	wait    func(ctx context.Context, owner string) (any, error) // blocks until held
	release func(ctx context.Context, held any) error
	close   func()
}

// Run measures and prints a Markdown table to cfg.Out.
func Run(ctx context.Context, cfg Config) error {
	cfg.defaults()
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "leasehold-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	fsync, err := measureFsync(dir, 300)
	if err != nil {
		return err
	}
	fmt.Fprintf(cfg.Out, "one 4 KiB write + fdatasync in the data directory: p50 %s, p99 %s\n\n",
		fmtDur(pct(fsync, 50)), fmtDur(pct(fsync, 99)))

	// The durable rows first: each gets its ratios to the references. The
	// server in the client's process is the suite's figure; the same
	// server in a process of its own (as the Redis references run) is
	// beside it: on the quiet 2-core machine it did fewer pairs/s, under
	// load more (docs/benchmarks.md).
	var lockers []*locker
	durable, err := serverLocker(ctx, "leasehold server, durable log (RESP, pipelined)", engineBackend(filepath.Join(dir, "durable")), cfg.Clients)
	if err != nil {
		return err
	}
	defer durable.close()
	lockers = append(lockers, durable)
	// The same server with the references' client: go-redis, a
	// connection per client, each caller writing its own command and
	// reading its reply (no pipelining, no hand-off between goroutines).
	viaGoRedis, err := serverGoRedisLocker(ctx, "leasehold server, durable log (RESP, go-redis client as the references)", engineBackend(filepath.Join(dir, "durable-goredis")), cfg.Clients)
	if err != nil {
		return err
	}
	defer viaGoRedis.close()
	lockers = append(lockers, viaGoRedis)
	own, err := processLocker("leasehold server, durable log, in a process of its own", childConfig{dir: filepath.Join(dir, "durable-own")}, cfg.Clients)
	if err != nil {
		return err
	}
	defer own.close()
	lockers = append(lockers, own)
	if cfg.LogSyncs != 0 {
		alt, err := serverLocker(ctx, fmt.Sprintf("leasehold server, durable log, --log-syncs %d", cfg.LogSyncs), engineBackendSyncs(filepath.Join(dir, "durable-alt"), cfg.LogSyncs), cfg.Clients)
		if err != nil {
			return err
		}
		defer alt.close()
		lockers = append(lockers, alt)
	}
	durables := len(lockers)
	nosync, err := serverLocker(ctx, "leasehold server, log without fsync (RESP, pipelined)", func() (server.Backend, error) {
		return server.OpenEngine(server.EngineConfig{Dir: filepath.Join(dir, "nosync"), NoSync: true})
	}, cfg.Clients)
	if err != nil {
		return err
	}
	defer nosync.close()
	lockers = append(lockers, nosync)
	onSQLite, err := serverLocker(ctx, "leasehold server over the SQLite store (proxy, durable)", sqliteBackend(filepath.Join(dir, "sqlite.db")), cfg.Clients)
	if err != nil {
		return err
	}
	defer onSQLite.close()
	lockers = append(lockers, onSQLite)
	refs := map[string]int{} // reference rows by what they are
	if cfg.RedisServer != "" {
		dr, err := startDurableRedis(ctx, cfg.RedisServer, dir)
		if err != nil {
			return err
		}
		defer dr.stop()
		r, err := redisLocker(ctx, dr.url, cfg.Clients, "Redis SET NX PX + Lua delete (go-redis, appendfsync always)")
		if err != nil {
			return err
		}
		defer r.close()
		refs["Redis with appendfsync always"] = len(lockers)
		lockers = append(lockers, r)
	}
	if cfg.RedisURL != "" {
		r, err := redisLocker(ctx, cfg.RedisURL, cfg.Clients, "Redis SET NX PX + Lua delete (go-redis, no persistence)")
		if err != nil {
			return err
		}
		defer r.close()
		refs["Redis without persistence"] = len(lockers)
		lockers = append(lockers, r)
	}

	// Pairs, interleaved by round so that noise hits every implementation.
	rates := make([][]float64, len(lockers))
	lats := make([][]time.Duration, len(lockers))
	for round := 0; round < cfg.Rounds; round++ {
		for i, l := range lockers {
			rate, lat, err := measurePairs(ctx, l, cfg.Clients, cfg.Duration)
			if err != nil {
				return fmt.Errorf("%s: %w", l.name, err)
			}
			rates[i] = append(rates[i], rate)
			lats[i] = append(lats[i], lat...)
		}
	}
	fmt.Fprintf(cfg.Out, "| implementation | pairs/s, %d clients (median of %d rounds) | pair p50 / p99 | handoff p50 / p99 (%d waiters) |\n", cfg.Clients, cfg.Rounds, cfg.Waiters)
	fmt.Fprintln(cfg.Out, "| --- | --- | --- | --- |")
	handoffs := make([]time.Duration, len(lockers))
	pairP50 := make([]time.Duration, len(lockers))
	for i, l := range lockers {
		slices.Sort(lats[i])
		slices.Sort(rates[i])
		h, err := measureHandoff(ctx, l, cfg.Waiters, cfg.Handoffs)
		if err != nil {
			return fmt.Errorf("%s handoff: %w", l.name, err)
		}
		handoffs[i] = pct(h, 50)
		pairP50[i] = pct(lats[i], 50)
		fmt.Fprintf(cfg.Out, "| %s | %.0f | %s / %s | %s / %s |\n", l.name, rates[i][len(rates[i])/2],
			fmtDur(pct(lats[i], 50)), fmtDur(pct(lats[i], 99)),
			fmtDur(pct(h, 50)), fmtDur(pct(h, 99)))
	}
	fmt.Fprintln(cfg.Out)
	median := func(i int) float64 { return rates[i][len(rates[i])/2] }
	for i := range durables {
		fmt.Fprintf(cfg.Out, "%s: ", lockers[i].name)
		for _, ref := range []string{"Redis with appendfsync always", "Redis without persistence"} {
			if j, ok := refs[ref]; ok {
				fmt.Fprintf(cfg.Out, "pairs/s %.2f × %s; ", median(i)/median(j), ref)
			}
		}
		fsync50 := float64(pct(fsync, 50))
		fmt.Fprintf(cfg.Out, "pair p50 %.2f × one fsync; handoff p50 %.2f × one fsync\n",
			float64(pairP50[i])/fsync50, float64(handoffs[i])/fsync50)
	}

	if cfg.Leases > 0 {
		fmt.Fprintln(cfg.Out)
		res, err := MeasureScale(ctx, filepath.Join(dir, "scale"), cfg.Leases)
		if err != nil {
			return err
		}
		if res.Recovered != res.Leases {
			return fmt.Errorf("scale: %d of %d leases recovered after the restart", res.Recovered, res.Leases)
		}
		fmt.Fprintf(cfg.Out, "leasehold engine, %d held leases: heap %.0f B/lease (%.0f MB), process RSS %.0f MB, granted in %s, restart %s using %s of CPU (%d recovered)\n",
			res.Leases, res.HeapPerLease, float64(res.HeapTotal)/1e6, float64(res.RSS)/1e6,
			res.AcquireTime.Round(time.Millisecond), res.RestartTime.Round(time.Millisecond), res.RestartCPU.Round(time.Millisecond), res.Recovered)
		if cfg.RedisURL != "" {
			per, err := redisMemory(ctx, cfg.RedisURL, cfg.Leases)
			if err != nil {
				return err
			}
			fmt.Fprintf(cfg.Out, "Redis, %d lock keys (SET NX PX): %.0f B/key of used_memory (%.0f MB)\n", cfg.Leases, per, per*float64(cfg.Leases)/1e6)
		}
	}
	if cfg.Queue > 0 {
		fmt.Fprintln(cfg.Out)
		for _, overRESP := range []bool{false, true} {
			res, err := MeasureQueue(ctx, filepath.Join(dir, "queue-"+strconv.FormatBool(overRESP)), cfg.Queue, 1000, overRESP)
			if err != nil {
				return err
			}
			fmt.Fprintf(cfg.Out, "leasehold engine, %s (one fsync p50 %s)\n", res, fmtDur(pct(fsync, 50)))
		}
	}
	return nil
}

func fmtDur(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.0f µs", float64(d)/1e3)
	default:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	}
}

// measurePairs runs clients goroutines doing acquire+release pairs for d.
func measurePairs(ctx context.Context, l *locker, clients int, d time.Duration) (float64, []time.Duration, error) {
	var wg sync.WaitGroup
	lat := make([][]time.Duration, clients)
	errs := make([]error, clients)
	start := time.Now()
	deadline := start.Add(d)
	var total atomic.Int64
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				t0 := time.Now()
				if err := l.pair(ctx, c); err != nil {
					errs[c] = err
					return
				}
				lat[c] = append(lat[c], time.Since(t0))
				total.Add(1)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, nil, err
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	return float64(total.Load()) / time.Since(start).Seconds(), all, nil
}

// measureHandoff queues waiters on one name; each holder notes the time
// just before it calls release, and the next holder the time it got the
// lease: the handoff includes the release's own round trip.
func measureHandoff(ctx context.Context, l *locker, waiters, handoffs int) ([]time.Duration, error) {
	base := time.Now()
	var relStart atomic.Int64
	var count atomic.Int64
	var mu sync.Mutex
	var out []time.Duration
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, waiters)
	for w := 0; w < waiters; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := "waiter-" + strconv.Itoa(w)
			for count.Load() < int64(handoffs) {
				held, err := l.wait(ctx, owner)
				if err != nil {
					if ctx.Err() == nil {
						errs[w] = err
						cancel()
					}
					return
				}
				got := int64(time.Since(base))
				if rs := relStart.Load(); rs != 0 {
					mu.Lock()
					out = append(out, time.Duration(got-rs))
					mu.Unlock()
					if count.Add(1) >= int64(handoffs) {
						cancel()
					}
				}
				relStart.Store(int64(time.Since(base)))
				if err := l.release(context.WithoutCancel(ctx), held); err != nil {
					errs[w] = err
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	slices.Sort(out)
	return out, nil
}

func engineBackend(dir string) func() (server.Backend, error) { return engineBackendSyncs(dir, 0) }

func engineBackendSyncs(dir string, logSyncs int) func() (server.Backend, error) {
	return func() (server.Backend, error) {
		return server.OpenEngine(server.EngineConfig{Dir: dir, LogSyncs: logSyncs})
	}
}

// sqliteBackend is the alternative to the engine's own log: the server as a
// proxy in front of the embedded SQLite store (one transaction per change).
func sqliteBackend(path string) func() (server.Backend, error) {
	return func() (server.Backend, error) {
		st, err := sqlite.Open(path)
		if err != nil {
			return nil, err
		}
		return server.NewProxy(st, server.ProxyConfig{Durable: true}), nil
	}
}

// serverLocker starts a backend and a RESP listener in this process and a
// pipelined client for it.
func serverLocker(ctx context.Context, name string, open func() (server.Backend, error), clients int) (*locker, error) {
	addr, stop, err := startRESP(ctx, open)
	if err != nil {
		return nil, err
	}
	return respLocker(name, addr, clients, stop)
}

// startRESP opens a backend and serves it over RESP on a loopback port in
// this process; stop shuts both down.
func startRESP(ctx context.Context, open func() (server.Backend, error)) (addr string, stop func(), err error) {
	e, err := open()
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		e.Close()
		return "", nil, err
	}
	rs := server.NewRESPServer(e, server.RESPOptions{})
	go rs.Serve(ln)
	return ln.Addr().String(), func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		rs.Shutdown(sctx)
		e.Close()
	}, nil
}

// processLocker starts the engine as a server process of its own (see
// process.go) and a pipelined client for it in this process.
func processLocker(name string, cfg childConfig, clients int) (*locker, error) {
	p, err := startServerProcess(cfg)
	if err != nil {
		return nil, err
	}
	return respLocker(name, p.addr, clients, p.stop)
}

// respLocker is a pipelined RESP client (two connections) of the server
// at addr; stop ends that server once the client is closed.
func respLocker(name, addr string, clients int, stop func()) (*locker, error) {
	st, err := remote.OpenRESP("leasehold://" + addr + "?conns=2&idle_conns=" + strconv.Itoa(16))
	if err != nil {
		stop()
		return nil, err
	}
	names := numbered("bench/pair/", clients)
	const ttl = 10 * time.Second
	return &locker{
		name: name,
		pair: func(ctx context.Context, c int) error {
			rec, err := st.TryAcquire(ctx, leasehold.AcquireRequest{Name: names[c], Owner: "bench", TTL: ttl})
			if err != nil {
				return err
			}
			return st.Release(ctx, names[c], "bench", rec.Token)
		},
		wait: func(ctx context.Context, owner string) (any, error) {
			return st.AcquireWait(ctx, leasehold.AcquireRequest{Name: "bench/handoff", Owner: owner, TTL: ttl})
		},
		release: func(ctx context.Context, held any) error {
			rec := held.(leasehold.Record)
			return st.Release(ctx, rec.Name, rec.Owner, rec.Token)
		},
		close: func() {
			st.Close()
			stop()
		},
	}, nil
}

// serverGoRedisLocker starts a backend and a RESP listener in this
// process and talks to it with go-redis as redisLocker talks to Redis: a
// pool with a connection per client, LH.ACQUIRE and LH.RELEASE sent with
// Do. A waiter waits in the server (LH.ACQUIRE ... WAIT) in steps of 2 s,
// under go-redis's 3 s read timeout.
func serverGoRedisLocker(ctx context.Context, name string, open func() (server.Backend, error), clients int) (*locker, error) {
	addr, stop, err := startRESP(ctx, open)
	if err != nil {
		return nil, err
	}
	rdb := goredis.NewClient(&goredis.Options{Addr: addr, Protocol: 2, PoolSize: clients + 16})
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		stop()
		return nil, fmt.Errorf("go-redis to the leasehold server: %w", err)
	}
	names := numbered("bench/goredis/", clients)
	const ttlMs = "10000"
	acquire := func(ctx context.Context, args ...any) (uint64, error) {
		v, err := rdb.Do(ctx, args...).Slice()
		if err != nil {
			return 0, err
		}
		if len(v) == 0 {
			return 0, fmt.Errorf("LH.ACQUIRE: empty grant")
		}
		tok, ok := v[0].(int64)
		if !ok {
			return 0, fmt.Errorf("LH.ACQUIRE: token %v is not an integer", v[0])
		}
		return uint64(tok), nil
	}
	type held struct {
		owner string
		token uint64
	}
	return &locker{
		name: name,
		pair: func(ctx context.Context, c int) error {
			tok, err := acquire(ctx, "LH.ACQUIRE", names[c], "bench", ttlMs)
			if err != nil {
				return err
			}
			return rdb.Do(ctx, "LH.RELEASE", names[c], "bench", tok).Err()
		},
		wait: func(ctx context.Context, owner string) (any, error) {
			for {
				tok, err := acquire(ctx, "LH.ACQUIRE", "bench/goredis-handoff", owner, ttlMs, "WAIT", "2000")
				if err == nil {
					return held{owner, tok}, nil
				}
				if !strings.HasPrefix(err.Error(), "HELD") || ctx.Err() != nil {
					return nil, err
				}
			}
		},
		release: func(ctx context.Context, h any) error {
			hk := h.(held)
			return rdb.Do(ctx, "LH.RELEASE", "bench/goredis-handoff", hk.owner, hk.token).Err()
		},
		close: func() {
			rdb.Close()
			stop()
		},
	}, nil
}

// numbered returns n names: prefix followed by 0, 1, ... n-1, one per
// client.
func numbered(prefix string, n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = prefix + strconv.Itoa(i)
	}
	return names
}

const unlockScript = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`

// redisLocker is the reference: SET NX PX and a compare-and-delete script
// with go-redis; waiters poll every millisecond (Redis has no queue).
func redisLocker(ctx context.Context, rawURL string, clients int, name string) (*locker, error) {
	opt, err := goredis.ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	opt.PoolSize = max(opt.PoolSize, clients+16)
	rdb := goredis.NewClient(opt)
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("redis: %w", err)
	}
	unlock := goredis.NewScript(unlockScript)
	if err := unlock.Load(ctx, rdb).Err(); err != nil {
		rdb.Close()
		return nil, err
	}
	keys := numbered("leasehold-bench:pair:", clients)
	const ttl = 10 * time.Second
	type heldKey struct{ key, val string }
	return &locker{
		name: name,
		pair: func(ctx context.Context, c int) error {
			ok, err := rdb.SetNX(ctx, keys[c], "bench", ttl).Result()
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("key %s unexpectedly held", keys[c])
			}
			return unlock.EvalSha(ctx, rdb, []string{keys[c]}, "bench").Err()
		},
		wait: func(ctx context.Context, owner string) (any, error) {
			for {
				ok, err := rdb.SetNX(ctx, "leasehold-bench:handoff", owner, ttl).Result()
				if err != nil {
					return nil, err
				}
				if ok {
					return heldKey{"leasehold-bench:handoff", owner}, nil
				}
				t := time.NewTimer(time.Millisecond)
				select {
				case <-ctx.Done():
					t.Stop()
					return nil, ctx.Err()
				case <-t.C:
				}
			}
		},
		release: func(ctx context.Context, held any) error {
			h := held.(heldKey)
			return unlock.EvalSha(ctx, rdb, []string{h.key}, h.val).Err()
		},
		close: func() { rdb.Close() },
	}, nil
}

// redisMemory sets n lock keys in database 15 and returns used_memory per
// key, then flushes that database.
func redisMemory(ctx context.Context, rawURL string, n int) (float64, error) {
	opt, err := goredis.ParseURL(rawURL)
	if err != nil {
		return 0, err
	}
	opt.DB = 15
	rdb := goredis.NewClient(opt)
	defer rdb.Close()
	if err := rdb.FlushDB(ctx).Err(); err != nil {
		return 0, err
	}
	before, err := usedMemory(ctx, rdb)
	if err != nil {
		return 0, err
	}
	for i := 0; i < n; i += 1000 {
		p := rdb.Pipeline()
		for j := i; j < min(n, i+1000); j++ {
			p.SetNX(ctx, "scale/"+strconv.Itoa(j), "owner-"+strconv.Itoa(j%1000), time.Hour)
		}
		if _, err := p.Exec(ctx); err != nil {
			return 0, err
		}
	}
	after, err := usedMemory(ctx, rdb)
	if err != nil {
		return 0, err
	}
	if err := rdb.FlushDB(ctx).Err(); err != nil {
		return 0, err
	}
	return float64(after-before) / float64(n), nil
}

func usedMemory(ctx context.Context, rdb *goredis.Client) (int64, error) {
	info, err := rdb.InfoMap(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(info["Memory"]["used_memory"], 10, 64)
}

// pct returns the p-th percentile (0-100) of sorted.
func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)*p/100, len(sorted)-1)]
}
