package stepfn

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/sfn"
	"github.com/leasehold/leasehold/stores"
	"github.com/leasehold/leasehold/testrig/verify"
)

// Config is one trial: executions of the generated machines, Go workers
// and "leasehold run" processes contending for one lock.
type Config struct {
	Lock string
	// TTL is the lease time of the machines and of the run processes.
	TTL time.Duration
	// MaxDelay is the machines' longest wait between acquire attempts.
	MaxDelay time.Duration
	// TaskGrace is the --task machine's: how long its work may go on after
	// Step Functions stopped waiting for it (the work model keeps to it).
	TaskGrace time.Duration
	// Slots are executions at once: each slot starts an execution, waits
	// for its end (redriving it as the faults say; the cleanup machine
	// runs after every dead end, as its EventBridge rule would start it)
	// and starts the next. Even slots run the Lambda machine, odd ones the
	// --task machine.
	Slots int
	// GoClients are logical processes of the verify lock workload, in this
	// process, with the dynamodb store; GoTTL their lease time.
	GoClients int
	GoTTL     time.Duration
	// RunLoops are loops of "leasehold run --store ... LOCK -- CMD"
	// processes, one after the other in each loop.
	RunLoops int
	// Gap is the pause between two cycles of a Go worker or two runs of a
	// run loop.
	Gap [2]time.Duration
	// Duration is how long new executions start; Drain how long the last
	// ones may then take before they are aborted.
	Duration, Drain time.Duration
	Hold            [2]time.Duration // a task body's normal critical section
	Faults          Faults
	Seed            uint64
	Dir             string // for the run commands' logs
}

// Faults are the probabilities of what an execution's first invocation of
// its task does (retried and redriven invocations behave), and of
// redrives.
type Faults struct {
	Fail float64 // the body fails with its own error after reading
	// Service: Lambda.ServiceException before the function runs;
	// ServiceRan: Lambda.ServiceException while the function runs on
	// (Lambda machine only; the --task machine's body behaves instead).
	Service, ServiceRan float64
	// Overrun: the Lambda function runs past its own timeout (and is
	// killed there); the --task work runs past the state's timeout, on
	// for up to twice TaskGrace after it was abandoned (and stops at
	// TaskGrace, as its contract says).
	Overrun float64
	// Abort: the execution is stopped while the body runs, AbortAfter
	// into a body that holds for AbortHold; the body goes on.
	Abort      float64
	AbortAfter [2]time.Duration
	AbortHold  [2]time.Duration
	// RedriveAborted and RedriveFailed are the probabilities that an
	// aborted or a failed (or timed-out) execution is redriven, after
	// RedriveDelay; at most twice per execution.
	RedriveAborted, RedriveFailed float64
	RedriveDelay                  [2]time.Duration
}

// Outcome is what a trial did and what the checkers found.
type Outcome struct {
	Result     verify.Result       // Overlaps, TokenRegressions (Go workers' grants), CS
	TokenOrder int                 // critical sections whose token was not above every earlier-ended one's
	Oracle     verify.OracleResult // of the whole Env's oracle, at the trial's end
	Counts     map[string]int
	CSBy       map[string]int // critical sections by client: "sfn", "go", "run"
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
	counts := verify.CountsNote(o.Counts)
	if counts != "" {
		counts += ", "
	}
	return fmt.Sprintf("%scritical sections: %d (machines %d, Go workers %d, leasehold run %d), %d overlaps, %d token order, oracle %d accepted / %d rejected, %s",
		counts, o.Result.CS, o.CSBy["sfn"], o.CSBy["go"], o.CSBy["run"], o.Result.Overlaps, o.TokenOrder, o.Oracle.Accepted, o.Oracle.Rejected, o.Took.Round(time.Second))
}

type trial struct {
	env      *Env
	cfg      Config
	ms       machines
	cleanups sync.WaitGroup
	mu       sync.Mutex
	rng      *rand.Rand
	evs      []verify.Event
	counts   map[string]int
	logs     []string
	bodies   sync.WaitGroup
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

// machines are the definitions a trial runs: the Lambda machine, the
// --task machine, and their cleanup machines.
type machines struct {
	lambda, task, lambdaCleanup, taskCleanup []byte
	lambdaPlan, taskPlan                     sfn.Plan
}

// generate writes the machines as "leasehold sfn" would for the trial.
func (env *Env) generate(cfg Config) (machines, error) {
	var m machines
	lc := sfn.Config{Table: env.Table, Lock: cfg.Lock, LambdaARN: FunctionARN, LambdaTimeout: env.LambdaTimeout,
		TTL: cfg.TTL, MaxDelay: cfg.MaxDelay, MaxClockSkew: time.Second}
	task, _ := json.Marshal(map[string]any{"Type": "Task", "Resource": TaskResource,
		"Arguments": map[string]any{"JobName": "r14", "leasehold": "{% $leasehold %}"}})
	tc := sfn.Config{Table: env.Table, Lock: cfg.Lock, Task: task, TaskGrace: cfg.TaskGrace,
		TTL: cfg.TTL, MaxDelay: cfg.MaxDelay, MaxClockSkew: time.Second}
	var err error
	for _, step := range []func() error{
		func() (err error) { m.lambda, err = sfn.Generate(lc); return },
		func() (err error) { m.lambdaCleanup, err = sfn.Cleanup(lc); return },
		func() (err error) { m.lambdaPlan, err = lc.Plan(); return },
		func() (err error) { m.task, err = sfn.Generate(tc); return },
		func() (err error) { m.taskCleanup, err = sfn.Cleanup(tc); return },
		func() (err error) { m.taskPlan, err = tc.Plan(); return },
	} {
		if err = step(); err != nil {
			return m, err
		}
	}
	return m, nil
}

// Run runs one trial and checks it; the caller judges the outcome. It
// returns an error only when the trial could not run. It logs on t (and
// may be called from any goroutine).
func (env *Env) Run(t testing.TB, cfg Config) (Outcome, error) {
	ms, err := env.generate(cfg)
	if err != nil {
		return Outcome{}, fmt.Errorf("generate: %w", err)
	}
	tr := &trial{env: env, cfg: cfg, ms: ms, rng: rand.New(rand.NewPCG(cfg.Seed, 14)), counts: map[string]int{}}
	if _, dup := env.trials.LoadOrStore(cfg.Lock, tr); dup {
		return Outcome{}, fmt.Errorf("two trials on the lock %q", cfg.Lock)
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
			tr.slot(soft, hard, i)
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
	tr.cleanups.Wait()
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
	o := Outcome{Result: res, TokenOrder: order, Oracle: env.Oracle.Check(), Counts: counts, Took: time.Since(start), CSBy: map[string]int{}}
	for _, ev := range h.Events {
		if ev.E == "cs" {
			o.CSBy[strings.SplitN(ev.Worker, "-", 2)[0]]++
		}
	}
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
	return o, nil
}

// goWorkers runs the verify lock workload in this process on the lock:
// GoClients loops of one cycle each (acquire, fenced increment, release),
// with a pause of Gap between cycles so that the machines, which poll,
// get the lock too.
func (tr *trial) goWorkers(ctx context.Context) *verify.History {
	octx, cancel := context.WithTimeout(context.Background(), time.Minute)
	store, err := stores.Open(octx, tr.env.StoreURL)
	cancel()
	if err != nil {
		tr.logf("go workers: open the store: %v", err)
		return nil
	}
	defer store.Close()
	var mu sync.Mutex
	all := &verify.History{}
	var wg sync.WaitGroup
	for c := range tr.cfg.GoClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				h, err := verify.RunInProcess(ctx, store, verify.WorkerConfig{ID: fmt.Sprintf("go-%d-%d", c, n), Keys: []string{tr.cfg.Lock},
					Clients: 1, Cycles: 1, TTL: tr.cfg.GoTTL, Oracle: tr.env.Oracle.URL(), Hold: tr.between(tr.cfg.Hold),
					Seed: tr.cfg.Seed + uint64(c)<<32 + uint64(n)}, verify.InProcess{})
				if err != nil {
					tr.logf("go workers: %v", err)
					return
				}
				mu.Lock()
				all.Events = append(all.Events, h.Events...)
				mu.Unlock()
				select {
				case <-ctx.Done():
				case <-time.After(tr.between(tr.cfg.Gap)):
				}
			}
		}()
	}
	wg.Wait()
	return all
}
