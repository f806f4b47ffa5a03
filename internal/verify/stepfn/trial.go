package stepfn

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/aslexec"
	"github.com/leasehold/leasehold/internal/verify"
	"github.com/leasehold/leasehold/sfn"
	"github.com/leasehold/leasehold/stores"
)

// Config is one trial: executions of a generated machine, Go workers and
// "leasehold run" processes contending for one lock.
type Config struct {
	Lock string
	TTL  time.Duration // the lease time of the machine and of the run processes
	// MaxDelay is the machine's longest wait between acquire attempts.
	MaxDelay time.Duration
	// Slots are executions at once: each slot starts an execution, waits
	// for its end (redriving it as the faults say) and starts the next.
	Slots int
	// GoClients are logical processes of the verify lock workload, in this
	// process, with the dynamodb store; GoTTL their lease time.
	GoClients int
	GoTTL     time.Duration
	// RunLoops are loops of "leasehold run --store ... LOCK -- CMD"
	// processes, one after the other in each loop.
	RunLoops int
	// Duration is how long new executions start; Drain how long the last
	// ones may then take before they are aborted.
	Duration, Drain time.Duration
	Hold            [2]time.Duration // a task body's normal critical section
	Faults          Faults
	Seed            uint64
	Dir             string // for the run commands' logs
}

// Faults are the probabilities of what a first invocation of the task
// body does (the rest behave), and of redrives.
type Faults struct {
	Fail    float64 // the body fails (after reading) with its own error
	Service float64 // the invocation fails with Lambda.ServiceException before the body runs
	Overrun float64 // the body runs past the state's timeout: it holds for Over
	Abort   float64 // the execution is aborted (StopExecution) while the body runs
	Over    [2]time.Duration
	// RedriveAborted and RedriveFailed are the probabilities that an
	// aborted or failed (or timed-out) execution is redriven, after
	// RedriveDelay; at most twice.
	RedriveAborted, RedriveFailed float64
	RedriveDelay                  [2]time.Duration
}

// Outcome is what a trial did and what the checkers found.
type Outcome struct {
	Result     verify.Result       // Overlaps, TokenRegressions (Go workers' grants), CS
	TokenOrder int                 // critical sections whose token was not above every earlier-ended one's
	Oracle     verify.OracleResult // of the whole Env's oracle, at the trial's end
	Counts     map[string]int
	First      string
	Took       time.Duration
}

// Violations counts the safety violations: overlapping critical
// sections, tokens out of order, and the oracle's violations.
func (o Outcome) Violations() int {
	return o.Result.Overlaps + o.Result.TokenRegressions + o.TokenOrder + o.Oracle.Violations()
}

// Note summarises the outcome for a report row.
func (o Outcome) Note() string {
	keys := make([]string, 0, len(o.Counts))
	for k := range o.Counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s %d, ", k, o.Counts[k])
	}
	return fmt.Sprintf("%s%d critical sections, %d overlaps, %d token order, oracle %d accepted / %d rejected, %s",
		b.String(), o.Result.CS, o.Result.Overlaps, o.TokenOrder, o.Oracle.Accepted, o.Oracle.Rejected, o.Took.Round(time.Second))
}

type trial struct {
	env    *Env
	cfg    Config
	mu     sync.Mutex
	rng    *rand.Rand
	evs    []verify.Event
	counts map[string]int
	logs   []string
	bodies sync.WaitGroup
	nexec  atomic.Int64
}

func (tr *trial) count(k string, n int) {
	tr.mu.Lock()
	tr.counts[k] += n
	tr.mu.Unlock()
}

func (tr *trial) logf(format string, args ...any) {
	tr.mu.Lock()
	if len(tr.logs) < 200 {
		tr.logs = append(tr.logs, fmt.Sprintf(format, args...))
	}
	tr.mu.Unlock()
}

func (tr *trial) emit(ev verify.Event) {
	tr.mu.Lock()
	tr.evs = append(tr.evs, ev)
	tr.mu.Unlock()
}

func (tr *trial) between(r [2]time.Duration) time.Duration {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return verify.Between(tr.rng, r[0], r[1])
}

func (tr *trial) chance(p float64) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.rng.Float64() < p
}

// draw picks what an invocation does: only an execution's first
// invocation of a run (no retry, no redrive) gets a fault.
func (tr *trial) draw(call aslexec.Call) string {
	if call.RetryCount > 0 || call.RedriveCount > 0 {
		return "ok"
	}
	f := tr.cfg.Faults
	tr.mu.Lock()
	x := tr.rng.Float64()
	tr.mu.Unlock()
	for _, k := range []struct {
		p    float64
		kind string
	}{{f.Fail, "fail"}, {f.Service, "service"}, {f.Overrun, "overrun"}, {f.Abort, "abort"}} {
		if x < k.p {
			return k.kind
		}
		x -= k.p
	}
	return "ok"
}

// body is the critical section of the machine's task: a fenced increment
// of the oracle with the token of the payload, recorded as a critical
// section from its start to its end — or to the moment Lambda killed it.
func (tr *trial) body(ctx context.Context, call aslexec.Call, l payloadLease) (any, error) {
	tr.bodies.Add(1)
	defer tr.bodies.Done()
	kind := tr.draw(call)
	tr.count("body "+kind, 1)
	if kind == "service" {
		return nil, aslexec.Fail("Lambda.ServiceException", "R14: injected service error")
	}
	var killedAt atomic.Int64
	stopKill := context.AfterFunc(ctx, func() { killedAt.Store(verify.Mono()) })
	defer stopKill()
	hold := tr.between(tr.cfg.Hold)
	switch kind {
	case "overrun":
		hold = tr.between(tr.cfg.Faults.Over)
	case "abort":
		d := tr.between([2]time.Duration{0, hold})
		go func() {
			time.Sleep(d)
			if call.Execution.Stop("R14.Aborted", "aborted by R14 while its task ran") == nil {
				tr.count("aborted in task", 1)
			}
		}()
	}
	proc := fmt.Sprintf("%s/r%d/a%d", call.Execution.Name, call.RedriveCount, call.RetryCount)
	from := verify.Mono()
	wrote, err := tr.env.oc.increment(ctx, l.Lock, proc, l.Token, hold)
	to := verify.Mono()
	if k := killedAt.Load(); k != 0 && k < to {
		to = k // killed at its own timeout: it did nothing after
	}
	tr.emit(verify.Event{E: "cs", Worker: "sfn", Proc: proc, Owner: call.Execution.Name, Key: l.Lock, Token: l.Token,
		From: from, To: to, Wrote: wrote, T: to})
	switch {
	case err == nil:
	case errors.Is(err, errStale):
		tr.count("stale token refused", 1)
	case ctx.Err() != nil:
		tr.count("killed at its timeout", 1)
	default:
		tr.logf("%s: %v", proc, err)
	}
	if kind == "fail" {
		return nil, errors.New("R14: injected task failure")
	}
	return map[string]any{"wrote": wrote}, nil
}

// Run runs one trial and checks it. It fails t only for a harness error;
// the caller judges the outcome.
func (env *Env) Run(t testing.TB, cfg Config) Outcome {
	t.Helper()
	def, err := sfn.Generate(sfn.Config{Table: env.Table, Lock: cfg.Lock, LambdaARN: FunctionARN, TTL: cfg.TTL,
		MaxDelay: cfg.MaxDelay, MaxClockSkew: time.Second})
	if err != nil {
		t.Fatalf("generate: %v", err)
	}
	tr := &trial{env: env, cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 14)), counts: map[string]int{}}
	if _, dup := env.trials.LoadOrStore(cfg.Lock, tr); dup {
		t.Fatalf("two trials on the lock %q", cfg.Lock)
	}
	defer env.trials.Delete(cfg.Lock)
	start := time.Now()
	soft, stopSoft := context.WithTimeout(context.Background(), cfg.Duration)
	defer stopSoft()
	hard, stopHard := context.WithTimeout(context.Background(), cfg.Duration+cfg.Drain)
	defer stopHard()
	var wg sync.WaitGroup
	for i := range cfg.Slots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr.slot(soft, hard, i, def)
		}()
	}
	for i := range cfg.RunLoops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr.runLoop(t, soft, hard, i)
		}()
	}
	var goHist *verify.History
	if cfg.GoClients > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			goHist = tr.goWorkers(soft)
		}()
	}
	wg.Wait()
	tr.bodies.Wait() // bodies that outlived their executions
	h := &verify.History{}
	if goHist != nil {
		h.Events = append(h.Events, goHist.Events...)
	}
	tr.mu.Lock()
	h.Events = append(h.Events, tr.evs...)
	counts := tr.counts
	logs := tr.logs
	tr.mu.Unlock()
	res := verify.Check(h, verify.CheckOptions{NoLinearizability: true})
	order, firstOrder := tokenOrder(h.Events)
	o := Outcome{Result: res, TokenOrder: order, Oracle: env.Oracle.Check(), Counts: counts, Took: time.Since(start)}
	o.First = res.FirstBad
	if o.First == "" {
		o.First = firstOrder
	}
	if o.First == "" {
		o.First = o.Oracle.First
	}
	if len(logs) > 0 {
		t.Logf("R14 %s: %d harness messages, the first: %s", cfg.Lock, len(logs), strings.Join(logs[:min(5, len(logs))], "; "))
	}
	return o
}

// goWorkers runs the verify lock workload in this process on the lock.
func (tr *trial) goWorkers(ctx context.Context) *verify.History {
	octx, cancel := context.WithTimeout(context.Background(), time.Minute)
	store, err := stores.Open(octx, tr.env.StoreURL)
	cancel()
	if err != nil {
		tr.logf("go workers: open the store: %v", err)
		return nil
	}
	defer store.Close()
	h, err := verify.RunInProcess(ctx, store, verify.WorkerConfig{ID: "go-" + tr.cfg.Lock, Keys: []string{tr.cfg.Lock},
		Clients: tr.cfg.GoClients, TTL: tr.cfg.GoTTL, Oracle: tr.env.Oracle.URL(), Hold: tr.cfg.Hold[0], Seed: tr.cfg.Seed}, verify.InProcess{})
	if err != nil {
		tr.logf("go workers: %v", err)
		return nil
	}
	return h
}
