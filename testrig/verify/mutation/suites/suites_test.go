package suites_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/redis"
	"github.com/leasehold/leasehold/server"
	"github.com/leasehold/leasehold/testrig/enginetest"
	"github.com/leasehold/leasehold/testrig/verify"
	"github.com/leasehold/leasehold/testrig/verify/crash"
)

func TestMain(m *testing.M) { verify.Main(m) }

func needMutated(t *testing.T) {
	t.Helper()
	if !mutated {
		t.Skip("an R10 suite: TestMutationsCaught in testrig/verify/mutation runs it in a binary built with -tags leasehold_mutations")
	}
}

// suite is one run of the lock workload in this process.
type suite struct {
	store leasehold.Store
	cfg   verify.WorkerConfig
	links []*verify.Link
	dur   time.Duration
	midCS func(ctx context.Context, client int, key string, l *leasehold.Lease)
	clock func(client int) clock.Clock
	// model, when set, adds to the history what the model must know of
	// the faults (engine restarts that lost state).
	model func(h *verify.History) *verify.History
}

func newSuite(store leasehold.Store, cfg verify.WorkerConfig, dur time.Duration) *suite {
	cfg.Seed = rand.Uint64()
	s := &suite{store: store, cfg: cfg, dur: dur}
	for i := 0; i < cfg.Clients; i++ {
		s.links = append(s.links, &verify.Link{Drop: true})
	}
	return s
}

// run runs the workload for s.dur against a fenced oracle and fails the
// test with "violations:" if the checkers or the oracle find any.
func (s *suite) run(t *testing.T) { s.runWith(t, nil) }

// runWith is run with faults, if not nil, called on the test's goroutine
// (so it may fail the test) while the workload runs; the workload still
// runs for s.dur.
func (s *suite) runWith(t *testing.T, faults func()) {
	t.Helper()
	o := verify.MustOracle(t, true, nil)
	defer o.Close()
	cfg := s.cfg
	cfg.Oracle = o.URL()
	ctx, cancel := context.WithTimeout(context.Background(), s.dur)
	defer cancel()
	in := verify.InProcess{
		Clock: s.clock,
		Wrap: func(c int, st leasehold.Store) leasehold.Store {
			s.links[c].Inner = st
			return s.links[c]
		},
	}
	if s.midCS != nil {
		in.MidCS = func(c int, key string, l *leasehold.Lease) { s.midCS(ctx, c, key, l) }
	}
	type result struct {
		h   *verify.History
		err error
	}
	ran := make(chan result, 1)
	go func() {
		h, err := verify.RunInProcess(ctx, s.store, cfg, in)
		ran <- result{h, err}
	}()
	if faults != nil {
		faults()
	}
	r := <-ran
	if r.err != nil {
		t.Fatal(r.err)
	}
	h := r.h
	if s.model != nil {
		h = s.model(h)
	}
	res := verify.Check(h, verify.CheckOptions{Timeout: 30 * time.Second})
	or := o.Check()
	t.Logf("%s; oracle: %d accepted, %d refused", res, or.Accepted, or.Rejected)
	// AfterDeadline is left out: whether a write sent in time arrives
	// before its writer's deadline depends on the machine's load.
	if res.Violations() > 0 || or.LostUpdates+or.StaleAccepted+or.CounterMismatch > 0 {
		t.Fatalf("violations: %s\noracle: %+v", res, or)
	}
	if !res.Passed() {
		t.Fatalf("undecided: %s", res)
	}
	if res.CS == 0 || or.Accepted == 0 {
		t.Fatalf("the run did nothing: %s; oracle %+v", res, or)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

func openEngine(t *testing.T, dir string, k clock.Clock) *server.Engine {
	t.Helper()
	e, err := server.OpenEngine(server.EngineConfig{Dir: dir, Clock: k})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("k%d", i)
	}
	return out
}

// TestSuiteEngine: four clients on two keys of the engine (in memory); a
// third of the holders are paused for 1.5 × TTL in their critical section
// (their store calls, keepalive included, blocked), so their leases expire
// and are taken over, and their releases arrive late. Porcupine catches a
// grant of a live lease and a release by someone who no longer holds it.
func TestSuiteEngine(t *testing.T) {
	needMutated(t)
	e := openEngine(t, "", clock.Real())
	defer e.Close()
	const ttl = 300 * time.Millisecond
	s := newSuite(server.StoreOf(e), verify.WorkerConfig{Keys: keys(2), Clients: 4, TTL: ttl, Hold: 20 * time.Millisecond}, 2500*time.Millisecond)
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(s.cfg.Seed, 0))
	s.midCS = func(ctx context.Context, c int, key string, l *leasehold.Lease) {
		mu.Lock()
		pause := rng.IntN(3) == 0
		mu.Unlock()
		if !pause {
			return
		}
		s.links[c].Freeze()
		sleepCtx(ctx, 3*ttl/2)
		s.links[c].Thaw()
	}
	s.run(t)
}

// restartable is the engine with its log, closed and reopened on the same
// directory while clients use it; their calls wait during a restart.
type restartable struct {
	t   *testing.T
	dir string

	mu sync.RWMutex
	e  *server.Engine
	s  leasehold.Store
}

func (r *restartable) restart() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.e != nil {
		r.e.Close()
	}
	e, err := server.OpenEngine(server.EngineConfig{Dir: r.dir})
	if err != nil {
		r.t.Errorf("reopen the engine: %v", err)
		return
	}
	r.e, r.s = e, server.StoreOf(e)
}

func (r *restartable) store() leasehold.Store {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.s
}

func (r *restartable) TryAcquire(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.s.TryAcquire(ctx, req)
}

func (r *restartable) Renew(ctx context.Context, name, owner string, token uint64, ttl time.Duration) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.s.Renew(ctx, name, owner, token, ttl)
}

func (r *restartable) Release(ctx context.Context, name, owner string, token uint64) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.s.Release(ctx, name, owner, token)
}

func (r *restartable) Get(ctx context.Context, name string) (leasehold.Record, error) {
	return r.store().Get(ctx, name)
}

func (r *restartable) List(ctx context.Context, prefix string) ([]leasehold.Record, error) {
	return r.store().List(ctx, prefix)
}

func (r *restartable) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.e.Close()
}

// TestSuiteRestart: four clients on two keys of the engine with its log,
// which is closed and reopened on the same directory every 300 ms (every
// acknowledged change is in the log by then: what a restart tests is
// recovery). The token-regression check catches a counter that recovery
// lost.
func TestSuiteRestart(t *testing.T) {
	needMutated(t)
	r := &restartable{t: t, dir: t.TempDir()}
	r.restart()
	defer r.Close()
	s := newSuite(r, verify.WorkerConfig{Keys: keys(2), Clients: 4, TTL: 300 * time.Millisecond, Hold: 10 * time.Millisecond}, 2500*time.Millisecond)
	done := make(chan struct{})
	var restarts []crash.Restart
	go func() {
		defer close(done)
		for i := 0; i < 6; i++ {
			time.Sleep(300 * time.Millisecond)
			rs := crash.Restart{Killed: verify.Mono()}
			r.restart()
			rs.Up = verify.Mono()
			restarts = append(restarts, rs)
		}
	}()
	// The engine gives every lease it recovers its full TTL again (by
	// design: crash.ExtendsOnRecovery); the model must know of each
	// restart, or a lease whose release was cut by a restart, still held
	// after its first TTL, is a violation to it (CI run 36; 3 of 3 runs
	// alone afterwards).
	s.model = func(h *verify.History) *verify.History {
		<-done
		h, _ = crash.RecoveryRenewals(h, restarts)
		return h
	}
	defer func() {
		<-done
		t.Logf("%d restarts", len(restarts))
	}()
	s.run(t)
}

// TestSuiteReplyDelay: two clients on one key of the memory store; client
// 0's granted acquires are answered 0.4 × TTL late. Every holder is cut off
// from the store once it has the lease (its renewals are lost) and holds
// until 50 ms before its local deadline, then writes; the other takes the
// lease when the store expires it. A deadline counted from the moment
// before the request ends before the store's expiry however late the reply
// came; one counted from the reply overlaps the next holder.
func TestSuiteReplyDelay(t *testing.T) {
	needMutated(t)
	store := memory.New()
	defer store.Close()
	const ttl = 500 * time.Millisecond
	s := newSuite(store, verify.WorkerConfig{Keys: keys(1), Clients: 2, TTL: ttl, WriteMargin: 2 * time.Millisecond}, 3*time.Second)
	s.links[0].Delay = 2 * ttl / 5
	for _, l := range s.links {
		l.Rest = ttl / 4
	}
	s.midCS = func(ctx context.Context, c int, key string, l *leasehold.Lease) {
		s.links[c].SetCut(true)
		if wait := time.Until(l.Deadline()) - 50*time.Millisecond; wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
			case <-l.Done():
			}
		}
	}
	s.run(t)
}

// jumps are the magnitudes of the wall-clock steps, 1 ms to 288 s.
var jumps = []time.Duration{time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond,
	time.Second, 10 * time.Second, 100 * time.Second, 288 * time.Second}

// TestSuiteWallJump: four clients on two keys of the engine (in memory),
// whose clock's wall reading steps forward or backward by 1 ms … 288 s every
// 150 ms. Expiry must follow the monotonic reading only; on the wall clock,
// a forward step expires every lease at once (a grant porcupine refuses)
// and a backward one keeps expired leases (a refusal it refuses).
func TestSuiteWallJump(t *testing.T) {
	needMutated(t)
	k := clock.NewSkewed(0)
	e := openEngine(t, "", k)
	defer e.Close()
	s := newSuite(server.StoreOf(e), verify.WorkerConfig{Keys: keys(2), Clients: 4, TTL: 500 * time.Millisecond, Hold: 100 * time.Millisecond}, 2500*time.Millisecond)
	stop := make(chan struct{})
	done := make(chan int)
	go func() {
		rng := rand.New(rand.NewPCG(s.cfg.Seed, 1))
		n := 0
		defer func() { done <- n }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(150 * time.Millisecond):
			}
			d := jumps[rng.IntN(len(jumps))]
			if n%2 == 1 {
				d = -d
			}
			k.JumpWall(d)
			n++
		}
	}()
	defer func() {
		close(stop)
		t.Logf("%d wall-clock steps", <-done)
	}()
	s.run(t)
}

// TestSuiteRedisRestart: four clients on two keys of a Redis without
// persistence, SIGKILLed and restarted (down 100 ms) three times, 1.6 s
// apart; TTL and hold-back 1 s. Each restart loses the leases, the fences
// and the restart marker; the model is told so (crash.StateLosses). After
// a restart the waiters, polling every 250 ms at most, ask again within
// the lost holders' TTL: the store must hold them back until the holders'
// leases would have expired, and porcupine catches a grant before that.
func TestSuiteRedisRestart(t *testing.T) {
	needMutated(t)
	const ttl = time.Second
	srv := enginetest.StartRedis(t) // --save "" --appendonly no
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, err := redis.Open(ctx, fmt.Sprintf("%s?holdback=%s", srv.RedisURL(), ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	s := newSuite(store, verify.WorkerConfig{Keys: keys(2), Clients: 4, TTL: ttl, Hold: 400 * time.Millisecond,
		OpTimeout: 500 * time.Millisecond, ErrorPause: 50 * time.Millisecond}, 5500*time.Millisecond)
	var restarts []crash.Restart
	s.model = func(h *verify.History) *verify.History {
		h, _ = crash.StateLosses(h, restarts)
		return h
	}
	s.runWith(t, func() {
		for i := 0; i < 3; i++ {
			time.Sleep(1500 * time.Millisecond)
			r := crash.Restart{Killed: verify.Mono()}
			srv.Kill()
			time.Sleep(100 * time.Millisecond)
			srv.Start()
			r.Up = verify.Mono()
			restarts = append(restarts, r)
		}
	})
	t.Logf("%d restarts", len(restarts))
}
