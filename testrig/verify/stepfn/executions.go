package stepfn

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/leasehold/leasehold/testrig/verify"
)

// Executions are executions of R14's generated Lambda machine on a lock
// whose other clients another suite runs (R15, testrig/verify/interop):
// Slots executions at once, Each one after the other in every slot, with
// no faults. Their Lambda body is R14's: a fenced increment of the Env's
// oracle under the lock's name with the grant's token, recorded as a
// critical section of worker "sfn" (Proc EXECUTION/rREDRIVE/aATTEMPT,
// Owner the execution's name).
type Executions struct {
	Lock string
	// Prefix names the executions: PREFIX-SLOT-N.
	Prefix        string
	TTL, MaxDelay time.Duration
	Slots, Each   int
	Hold          [2]time.Duration
	// Timeout bounds the whole run: executions still running then are
	// aborted.
	Timeout time.Duration
	// NoLock runs, instead of the generated machine, a machine of one
	// Task that invokes the same function with a lease it never took
	// (token NoLockToken): a body run without the lock, for a negative
	// control.
	NoLock bool
	Seed   uint64
}

// NoLockToken is the made-up token of an Executions.NoLock body.
const NoLockToken = 1

// ExecutionsResult is what RunExecutions saw: the bodies' critical
// sections, counts of the executions' ends ("SUCCEEDED", "FAILED
// Leasehold.LockNotAcquired", ...) and of what the bodies did, and the
// harness's messages.
type ExecutionsResult struct {
	Events []verify.Event
	Counts map[string]int
	Logs   []string
}

// RunExecutions runs the executions on the Env's executors (slot i on
// executor i mod len(Skews)) and returns when all of them, their cleanup
// machines and their bodies have ended. It returns an error only when
// they could not run.
func (env *Env) RunExecutions(cfg Executions) (ExecutionsResult, error) {
	// generate writes the --task machine too (not run here): TaskGrace is
	// R14's, for it only.
	ms, err := env.generate(Config{Lock: cfg.Lock, TTL: cfg.TTL, MaxDelay: cfg.MaxDelay, TaskGrace: 2500 * time.Millisecond})
	if err != nil {
		return ExecutionsResult{}, fmt.Errorf("generate: %w", err)
	}
	def := ms.lambda
	if cfg.NoLock {
		if def, err = noLockMachine(cfg.Lock); err != nil {
			return ExecutionsResult{}, err
		}
	}
	tr := &trial{env: env, cfg: Config{Lock: cfg.Lock, TTL: cfg.TTL, Hold: cfg.Hold, Seed: cfg.Seed}, ms: ms,
		rng: rand.New(rand.NewPCG(cfg.Seed, 15)), counts: map[string]int{}}
	if _, dup := env.trials.LoadOrStore(cfg.Lock, tr); dup {
		return ExecutionsResult{}, fmt.Errorf("two runs on the lock %q", cfg.Lock)
	}
	defer env.trials.Delete(cfg.Lock)
	hard, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	var wg sync.WaitGroup
	for i := range cfg.Slots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ex := env.execs[i%len(env.execs)]
			for n := 0; n < cfg.Each && hard.Err() == nil; n++ {
				name := fmt.Sprintf("%s-%d-%d", cfg.Prefix, i, n)
				x, err := ex.Start(def, "r15-lambda", name, map[string]any{"slot": i, "n": n})
				if err != nil {
					tr.logf("start %s: %v", name, err)
					return
				}
				r := tr.wait(hard, x)
				tr.cleanup(ex, ms.lambdaCleanup, x, r)
				key := string(r.Status)
				if r.Error != "" {
					key += " " + r.Error
				}
				tr.count(key, 1)
			}
		}()
	}
	wg.Wait()
	tr.cleanups.Wait()
	tr.bodies.Wait()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return ExecutionsResult{Events: tr.evs, Counts: tr.counts, Logs: tr.logs}, nil
}

// noLockMachine is a machine that invokes R14's function on lock without
// taking it: what the generated machine's task state would do if Acquire
// were skipped.
func noLockMachine(lock string) ([]byte, error) {
	return json.Marshal(map[string]any{
		"Comment":       "R15 control: the Lambda body without the lock",
		"QueryLanguage": "JSONata",
		"StartAt":       "Task",
		"States": map[string]any{"Task": map[string]any{
			"Type":     "Task",
			"Resource": "arn:aws:states:::lambda:invoke",
			"Arguments": map[string]any{"FunctionName": FunctionARN, "Payload": map[string]any{
				"leasehold": map[string]any{"lock": lock, "owner": "no-lock", "token": NoLockToken}}},
			"End": true,
		}},
	})
}
