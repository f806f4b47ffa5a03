package clockfault_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/server"
	"github.com/leasehold/leasehold/sqlite"
	"github.com/leasehold/leasehold/testrig/verify"
)

func TestMain(m *testing.M) { verify.Main(m) }

// stores are the stores that take an injected clock.
var stores = []string{"memory", "sqlite", "server"}

// openStore opens a private instance of the named store, judging expiry by
// k, and closes it when the test ends.
func openStore(t *testing.T, name string, k clock.Clock) (leasehold.Store, string) {
	t.Helper()
	var s leasehold.Store
	note := ""
	switch name {
	case "memory":
		s = memory.New(memory.WithClock(k))
	case "sqlite":
		st, err := sqlite.Open(filepath.Join(t.TempDir(), "leases.db"), sqlite.WithClock(k))
		if err != nil {
			t.Fatal(err)
		}
		s = st
	case "server":
		e, err := server.OpenEngine(server.EngineConfig{Dir: t.TempDir(), Clock: k})
		if err != nil {
			t.Fatal(err)
		}
		s = server.StoreOf(e)
		note = "the engine in-process, durable log; "
	default:
		t.Fatalf("unknown store %q", name)
	}
	t.Cleanup(func() { s.Close() })
	return s, note
}

// run is one in-process run of the lock workload: clients with their own
// clocks and links, an oracle, a hook in every critical section.
type run struct {
	id     string
	store  leasehold.Store
	cfg    verify.WorkerConfig
	fenced bool
	clocks []*clock.Skewed
	links  []*verify.Link
	// dur ends the run (its clients finish the cycle they are in);
	// done, when it closes, ends it earlier.
	dur   time.Duration
	done  <-chan struct{}
	midCS func(ctx context.Context, client int, key string, l *leasehold.Lease)
}

// newRun prepares a run whose client i has a clock at skews[i%len(skews)].
func newRun(id string, store leasehold.Store, cfg verify.WorkerConfig, skews ...float64) *run {
	r := &run{id: id, store: store, cfg: cfg}
	for i := 0; i < cfg.Clients; i++ {
		r.clocks = append(r.clocks, clock.NewSkewed(skews[i%len(skews)]))
		r.links = append(r.links, &verify.Link{})
	}
	return r
}

type outcome struct {
	res verify.Result
	or  verify.OracleResult
}

// porcupineOK: every key linearizable and no token regression (the
// store's own behaviour, whatever the clients believed).
func (o outcome) porcupineOK() bool {
	return o.res.Keys > 0 && o.res.Ok == o.res.Keys && o.res.Illegal == 0 && o.res.TokenRegressions == 0
}

// fencingViolations are the oracle's findings that fencing must prevent.
func (o outcome) fencingViolations() int {
	return o.or.LostUpdates + o.or.StaleAccepted + o.or.CounterMismatch
}

func (r *run) exec(t *testing.T) outcome {
	t.Helper()
	o, err := verify.NewOracle(r.fenced)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	cfg := r.cfg
	cfg.ID = r.id
	cfg.Oracle = o.URL()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-time.After(r.dur):
		case <-r.done:
		case <-ctx.Done():
		}
		cancel()
	}()
	in := verify.InProcess{
		Clock: func(c int) clock.Clock { return r.clocks[c] },
		Wrap: func(c int, s leasehold.Store) leasehold.Store {
			r.links[c].Inner = s
			return r.links[c]
		},
	}
	if r.midCS != nil {
		in.MidCS = func(c int, key string, l *leasehold.Lease) { r.midCS(ctx, c, key, l) }
	}
	h, err := verify.RunInProcess(ctx, r.store, cfg, in)
	if err != nil {
		t.Fatal(err)
	}
	return outcome{res: verify.Check(h, verify.CheckOptions{}), or: o.Check()}
}

func keys(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s/k%d", prefix, i)
	}
	return out
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

// holdToEnd waits, on the holder's own clock, until its lease has only
// leave left before its local deadline.
func holdToEnd(ctx context.Context, k clock.Clock, l *leasehold.Lease, leave time.Duration) {
	for {
		wait := l.Deadline().Sub(k.Now()) - leave
		if wait <= 0 || l.Err() != nil {
			return
		}
		tm := k.NewTimer(wait)
		select {
		case <-tm.C():
		case <-ctx.Done():
			tm.Stop()
			return
		case <-l.Done():
			tm.Stop()
			return
		}
	}
}

// jumps are the magnitudes of clock steps, 1 ms to 288 s.
var jumps = []time.Duration{time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond,
	time.Second, 10 * time.Second, 100 * time.Second, 288 * time.Second}

// TestClockJumps is R8-jump. In every critical section the holder's
// monotonic reading steps forward or backward by 1 ms … 288 s (its
// boot-time reading runs true, as CLOCK_BOOTTIME does when the other is
// wrong), and the store clock's wall reading steps as well. After a forward
// step of at least the TTL the holder must no longer believe it holds; after
// a backward step of at least the TTL, held past the true expiry (1.5 ×
// TTL of real time without renewals, which the stepped reading postpones),
// neither: the boot-time deadline ends its belief. The checkers and the
// fenced oracle must find nothing.
func TestClockJumps(t *testing.T) {
	for _, name := range stores {
		t.Run(name, func(t *testing.T) {
			storeClock := clock.NewSkewed(0)
			store, note := openStore(t, name, storeClock)
			const ttl = 500 * time.Millisecond
			cfg := verify.WorkerConfig{Keys: keys("jump", verify.Size(2, 6)), Clients: verify.Size(4, 8), TTL: ttl, Seed: rand.Uint64()}
			r := newRun("jump", store, cfg, 0)
			r.fenced, r.dur = true, verify.Size(4*time.Second, 30*time.Second)
			rngs := make([]*rand.Rand, cfg.Clients)
			for i := range rngs {
				rngs[i] = rand.New(rand.NewPCG(cfg.Seed, uint64(i)))
			}
			var fwd, back, wall, strict, believed atomic.Int64
			var wallMu sync.Mutex
			r.midCS = func(ctx context.Context, c int, key string, l *leasehold.Lease) {
				rng := rngs[c]
				k := r.clocks[c]
				m := jumps[rng.IntN(len(jumps))]
				if rng.IntN(2) == 0 {
					k.Jump(m)
					fwd.Add(1)
					if m >= ttl {
						strict.Add(1)
						if l.Held() {
							believed.Add(1)
							t.Errorf("%s: still held after its clock stepped %s forward", key, m)
						}
					}
				} else {
					k.Jump(-m)
					back.Add(1)
					if rng.IntN(2) == 0 {
						sleepCtx(ctx, 3*ttl/2)
						if m >= ttl && ctx.Err() == nil {
							strict.Add(1)
							if l.Held() {
								believed.Add(1)
								t.Errorf("%s: still held %s after its clock stepped %s back", key, 3*ttl/2, m)
							}
						}
					}
				}
				wallMu.Lock()
				w := jumps[rng.IntN(len(jumps))]
				if rng.IntN(2) == 0 {
					w = -w
				}
				storeClock.JumpWall(w)
				wallMu.Unlock()
				wall.Add(1)
			}
			start := time.Now()
			out := r.exec(t)
			t.Logf("%s: %s; oracle %d accepted, %d refused; %d forward and %d backward client steps, %d store wall steps in %s",
				name, out.res, out.or.Accepted, out.or.Rejected, fwd.Load(), back.Load(), wall.Load(), time.Since(start).Round(time.Millisecond))
			viol := out.res.Violations() + out.or.Violations() + int(believed.Load())
			verify.Report(t, verify.Row{Suite: "R8-jump", Store: name, Ops: out.res.Ops, Faults: int(fwd.Load() + back.Load() + wall.Load()),
				Violations: viol, Checker: out.res.Checker(),
				Note: fmt.Sprintf("%s%d forward, %d backward client steps of 1ms–288s, %d store wall steps; %d checked to end the holder's belief, %d did not",
					note, fwd.Load(), back.Load(), wall.Load(), strict.Load(), believed.Load())})
			if !out.res.Passed() || out.or.Violations() > 0 {
				t.Fatalf("violations: %s\noracle: %+v", out.res, out.or)
			}
			if fwd.Load() == 0 || back.Load() == 0 || out.or.Accepted == 0 {
				t.Fatalf("the run did too little: %d forward, %d backward steps, %d writes accepted", fwd.Load(), back.Load(), out.or.Accepted)
			}
		})
	}
}

// skewRun is the skew workload: four clients on one key, whose clocks run
// slow, fast, slow, slow by skew. Each holder is cut off from the store
// right after its grant (its renewals are lost) and holds, on its own
// clock, until its lease has 12 ms left, then writes (WriteMargin 2 ms).
// The others wait for the lease and get it when the store expires it; a
// client rests TTL/4 after each release, so that it does not take the
// lease straight back. Only a slow holder can believe it holds past the
// store's expiry, hence three of four.
func skewRun(id string, store leasehold.Store, p skewParams, skew float64, fenced bool) (*run, *atomic.Int64) {
	cfg := verify.WorkerConfig{Keys: keys(id, 1), Clients: 4, TTL: p.ttl, WriteMargin: 2 * time.Millisecond, Seed: rand.Uint64()}
	r := newRun(id, store, cfg, -skew, skew, -skew, -skew)
	r.fenced, r.dur = fenced, p.dur
	for _, l := range r.links {
		l.Rest = cfg.TTL / 4
	}
	var episodes atomic.Int64
	r.midCS = func(ctx context.Context, c int, key string, l *leasehold.Lease) {
		r.links[c].SetCut(true)
		episodes.Add(1)
		holdToEnd(ctx, r.clocks[c], l, 12*time.Millisecond)
	}
	return r, &episodes
}

// skewParams are a store's TTL and run length for the skew suites. A slow
// holder's belief outlasts the store's expiry by about 4.2 % of the TTL
// less 18 ms (the drift margin and what it leaves itself before writing):
// 24 ms with a TTL of 1 s. The next holder's grant must return within that
// window for the overlap to show. An SQLite grant is a transaction with an
// fsync, which on a shared disk takes up to some 70 ms, so SQLite gets a
// TTL of 3 s (a window of 108 ms) and longer runs for as many episodes.
type skewParams struct {
	ttl, dur time.Duration
	note     string
}

func skewParamsFor(name string) skewParams {
	if name == "sqlite" {
		return skewParams{ttl: 3 * time.Second, dur: verify.Size(10*time.Second, 60*time.Second), note: "TTL 3s (fsync latency); "}
	}
	return skewParams{ttl: time.Second, dur: verify.Size(5*time.Second, 30*time.Second), note: "TTL 1s; "}
}

// openSkewStore opens the store name on the real clock for a skew run and
// returns it, its note (the parameters' included) and its parameters.
func openSkewStore(t *testing.T, name string) (leasehold.Store, string, skewParams) {
	t.Helper()
	store, note := openStore(t, name, clock.Real())
	p := skewParamsFor(name)
	return store, note + p.note, p
}

// TestClockSkewWithinBudget is R8-skew1: clocks 1 % slow or fast, within
// the default drift budget (rho = 1 %). Holders that hold to the end of
// their belief with their renewals lost still stop before the store expires
// their lease: no overlap, and porcupine and the fenced oracle find
// nothing.
func TestClockSkewWithinBudget(t *testing.T) {
	for _, name := range stores {
		t.Run(name, func(t *testing.T) {
			store, note, p := openSkewStore(t, name)
			p.dur -= p.ttl // enough for four holds; no control to catch
			r, episodes := skewRun("skew1", store, p, 0.01, true)
			out := r.exec(t)
			t.Logf("%s: %s; oracle %d accepted, %d refused; %d holds to the end", name, out.res, out.or.Accepted, out.or.Rejected, episodes.Load())
			verify.Report(t, verify.Row{Suite: "R8-skew1", Store: name, Ops: out.res.Ops, Faults: int(episodes.Load()),
				Violations: out.res.Violations() + out.or.Violations(), Checker: out.res.Checker(),
				Note: fmt.Sprintf("%sclients 1%% slow (3) and fast (1) on one key; faults: holders cut off from the store, holding to their local deadline; %d critical sections, %d writes accepted, %d refused as stale",
					note, out.res.CS, out.or.Accepted, out.or.Rejected)})
			if !out.res.Passed() || out.or.Violations() > 0 {
				t.Fatalf("violations within the drift budget: %s\noracle: %+v", out.res, out.or)
			}
			if episodes.Load() < 2 || out.or.Accepted == 0 {
				t.Fatalf("the run did too little: %d holds to the end, %d writes accepted", episodes.Load(), out.or.Accepted)
			}
		})
	}
}

// TestClockSkewBeyondBudget is R8-skew5: clocks 5 % slow or fast, beyond the
// budget. A slow holder believes it holds past the store's expiry, while
// the next holder already has the lease: the overlap checker sees it.
// Fenced, the oracle refuses the late writes: 0 lost updates, 0 stale
// writes accepted. Unfenced (the control), ten runs at once on fresh keys;
// each is caught if the overlap checker or the oracle finds a violation
// (one without any runs again, three tries at most), and at least 9 of 10
// must be.
func TestClockSkewBeyondBudget(t *testing.T) {
	for _, name := range stores {
		t.Run(name, func(t *testing.T) {
			store, note, p := openSkewStore(t, name)

			r, episodes := skewRun("skew5f", store, p, 0.05, true)
			out := r.exec(t)
			t.Logf("fenced: %s; oracle %+v; %d holds to the end", out.res, out.or, episodes.Load())
			verify.Report(t, verify.Row{Suite: "R8-skew5-fenced", Store: name, Ops: out.res.Ops, Faults: int(episodes.Load()),
				Violations: out.fencingViolations(), Checker: porcupineChecker(out),
				Note: fmt.Sprintf("%sclients 5%% slow (3) and fast (1) on one key, holders cut off from the store holding to their local deadline; %d overlapping critical sections (beliefs past the store's expiry, expected beyond the budget); the oracle refused %d stale writes, accepted %d; %d lost updates, %d stale writes accepted",
					note, out.res.Overlaps, out.or.Rejected, out.or.Accepted, out.or.LostUpdates, out.or.StaleAccepted)})
			if !out.porcupineOK() || out.fencingViolations() > 0 {
				t.Fatalf("fencing did not hold: %s\noracle: %+v", out.res, out.or)
			}
			if out.res.Overlaps == 0 {
				t.Fatalf("no holder believed past the store's expiry: the fault had no effect (%s)", out.res)
			}

			// Every run on a store of its own: ten runs' waiters polling
			// one SQLite file queue behind each other's fsyncs for longer
			// than the few milliseconds the overlap lasts. A run in which
			// no violation showed (no holder's belief outlasted the store's
			// expiry while another held and wrote: the skew took no
			// effect, which a loaded machine's timing can do) runs again
			// on a fresh key, up to three tries in all (CI run 75: 7 of
			// 10 caught on a loaded machine, the three others without
			// effect).
			const runs, tries = 10, 3
			stores := make([]leasehold.Store, runs)
			for i := range stores {
				stores[i], _ = openStore(t, name, clock.Real())
			}
			caughtAt := make([]bool, runs)
			var all []outcome
			var eps []*atomic.Int64
			retried := 0
			for try := 0; try < tries; try++ {
				var pending []int
				for i, c := range caughtAt {
					if !c {
						pending = append(pending, i)
					}
				}
				if len(pending) == 0 {
					break
				}
				if try > 0 {
					retried += len(pending)
				}
				outs := make([]outcome, len(pending))
				tryEps := make([]*atomic.Int64, len(pending))
				var wg sync.WaitGroup
				for j, i := range pending {
					wg.Add(1)
					go func() {
						defer wg.Done()
						key := fmt.Sprintf("skew5u%d", i)
						if try > 0 {
							key = fmt.Sprintf("skew5u%dt%d", i, try)
						}
						r, e := skewRun(key, stores[i], p, 0.05, false)
						tryEps[j] = e
						outs[j] = r.exec(t)
					}()
				}
				wg.Wait()
				for j, i := range pending {
					caughtAt[i] = outs[j].fencingViolations() > 0 || outs[j].res.Overlaps > 0
				}
				all = append(all, outs...)
				eps = append(eps, tryEps...)
			}
			caught, byOracle, byOverlap, ops, faults, first := 0, 0, 0, 0, 0, ""
			for _, c := range caughtAt {
				if c {
					caught++
				}
			}
			for i, o := range all {
				ops += o.res.Ops
				faults += int(eps[i].Load())
				if !o.porcupineOK() {
					t.Errorf("unfenced run %d: the store's history is not linearizable: %s", i, o.res)
				}
				if o.fencingViolations() > 0 {
					byOracle++
				}
				if o.res.Overlaps > 0 {
					byOverlap++
				}
				if (o.fencingViolations() > 0 || o.res.Overlaps > 0) && first == "" {
					first = o.res.FirstBad + " " + o.or.First
				}
			}
			t.Logf("unfenced: caught %d/%d (%d runs again; oracle %d, overlap checker %d of %d runs); first: %s", caught, runs, retried, byOracle, byOverlap, len(all), first)
			verify.Report(t, verify.Row{Suite: "R8-skew5-unfenced", Store: name, Ops: ops, Faults: faults, Violations: caught,
				Checker: fmt.Sprintf("caught %d/%d", caught, runs),
				Note:    fmt.Sprintf("%s%d runs at once on stores of their own, as the fenced run, %d run again (no effect at first); caught by the oracle (lost updates) in %d, by the overlap checker in %d", note, runs, retried, byOracle, byOverlap)})
			if caught < 9 {
				t.Fatalf("the unfenced control caught the skew in only %d of %d runs", caught, runs)
			}
		})
	}
}

func porcupineChecker(o outcome) string {
	switch {
	case o.res.Illegal > 0:
		return "illegal"
	case o.res.Keys == 0 || o.res.Ok != o.res.Keys:
		return "unknown"
	case o.res.TokenRegressions > 0:
		return "violations"
	}
	return "ok"
}

// TestSuspend is R8-suspend: a holder is suspended for 2 × TTL in the
// middle of its critical section — its monotonic reading and timers stand
// still, its boot-time reading goes on, its goroutine and its store calls
// are blocked — while others wait for the lease. After resuming it must find
// its lease lost (Held false at once, Done closed with ErrLost) every time,
// and the checkers and the fenced oracle must find nothing.
func TestSuspend(t *testing.T) {
	for _, name := range stores {
		t.Run(name, func(t *testing.T) {
			store, note := openStore(t, name, clock.Real())
			const ttl = 500 * time.Millisecond
			const suspenders = 4 // clients 0-3; clients 4 and 5 only contend
			target := verify.Size(20, 100)
			cfg := verify.WorkerConfig{Keys: keys("suspend", verify.Size(2, 6)), Clients: 6, TTL: ttl, Hold: 10 * time.Millisecond, Seed: rand.Uint64()}
			r := newRun("suspend", store, cfg, 0)
			r.fenced, r.dur = true, 10*time.Minute
			done := make(chan struct{})
			r.done = done
			var started, finished, reported atomic.Int64
			r.midCS = func(ctx context.Context, c int, key string, l *leasehold.Lease) {
				if c >= suspenders || started.Add(1) > int64(target) {
					return
				}
				k, ln := r.clocks[c], r.links[c]
				k.Suspend()
				ln.Freeze()
				time.Sleep(2 * ttl)
				ln.Thaw()
				k.Resume()
				held := l.Held()
				select {
				case <-l.Done():
				case <-time.After(30 * time.Second):
				}
				lost := errors.Is(l.Err(), leasehold.ErrLost)
				if !held && lost {
					reported.Add(1)
				} else {
					t.Errorf("%s: after a suspend of %s: Held %v, Err %v", key, 2*ttl, held, l.Err())
				}
				if finished.Add(1) == int64(target) {
					close(done)
				}
			}
			start := time.Now()
			out := r.exec(t)
			n := int(finished.Load())
			t.Logf("%s: %s; oracle %d accepted, %d refused; %d suspends, lost reported %d, in %s",
				name, out.res, out.or.Accepted, out.or.Rejected, n, reported.Load(), time.Since(start).Round(time.Millisecond))
			verify.Report(t, verify.Row{Suite: "R8-suspend", Store: name, Ops: out.res.Ops, Faults: n,
				Violations: out.res.Violations() + out.or.Violations() + n - int(reported.Load()), Checker: out.res.Checker(),
				Note: fmt.Sprintf("%slost reported %d/%d; suspends of 2 × TTL (%s)", note, reported.Load(), n, 2*ttl)})
			if !out.res.Passed() || out.or.Violations() > 0 {
				t.Fatalf("violations: %s\noracle: %+v", out.res, out.or)
			}
			if n != target || int(reported.Load()) != n {
				t.Fatalf("%d of %d suspends done, lost reported after %d", n, target, reported.Load())
			}
		})
	}
}
