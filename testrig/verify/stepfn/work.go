package stepfn

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/testrig/aslexec"
	"github.com/leasehold/leasehold/testrig/verify"
)

// draw picks what an invocation does: only an execution's first
// invocation of a run (no retry, no redrive) gets a fault.
func (tr *trial) draw(call aslexec.Call, lambda bool) string {
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
	}{{f.Fail, "fail"}, {f.Service, "service"}, {f.ServiceRan, "service-ran"}, {f.Overrun, "overrun"}, {f.Abort, "abort"}} {
		if x < k.p {
			if !lambda && (k.kind == "service" || k.kind == "service-ran") {
				return "ok"
			}
			return k.kind
		}
		x -= k.p
	}
	return "ok"
}

// body runs one invocation of a machine's task: the Lambda function
// (lambda) or the --task work. ctx is the Lambda sandbox's (cancelled at
// the function's own timeout) or the executor's.
func (tr *trial) body(ctx context.Context, call aslexec.Call, l payloadLease, lambda bool) (any, error) {
	kind := tr.draw(call, lambda)
	machine := map[bool]string{true: "lambda", false: "task"}[lambda]
	tr.count(machine+" body "+kind, 1)
	f := tr.cfg.Faults
	hold := tr.between(tr.cfg.Hold)
	switch kind {
	case "service":
		return nil, aslexec.Fail("Lambda.ServiceException", "R14: injected service error, the function did not run")
	case "service-ran":
		tr.bodies.Add(1)
		go func() {
			defer tr.bodies.Done()
			tr.work(ctx, call, l, hold, false)
		}()
		return nil, aslexec.Fail("Lambda.ServiceException", "R14: injected service error, the function runs on")
	case "overrun":
		if lambda {
			hold = tr.env.LambdaTimeout + tr.between([2]time.Duration{500 * time.Millisecond, 2 * time.Second})
		} else {
			p := tr.ms.taskPlan
			hold = p.TaskTimeout + tr.between([2]time.Duration{tr.cfg.TaskGrace / 5, 2 * tr.cfg.TaskGrace})
		}
	case "abort":
		hold = tr.between(f.AbortHold)
		d := tr.between(f.AbortAfter)
		go func() {
			time.Sleep(d)
			if call.Execution.Stop("R14.Aborted", "aborted by R14 while its task ran") == nil {
				tr.count("aborted in the task", 1)
			}
		}()
	}
	tr.bodies.Add(1)
	wrote := tr.work(ctx, call, l, hold, !lambda)
	tr.bodies.Done()
	if kind == "fail" {
		return nil, errors.New("R14: injected task failure")
	}
	return map[string]any{"wrote": wrote}, nil
}

// work is the critical section: a fenced increment of the oracle with the
// grant's token, holding for hold, recorded from its start to its end.
// A Lambda function ends at the latest when its sandbox is killed (ctx);
// --task work (graced) at the latest TaskGrace after Step Functions
// abandoned it, which is what the user declared with --task-grace.
func (tr *trial) work(ctx context.Context, call aslexec.Call, l payloadLease, hold time.Duration, graced bool) bool {
	var cutAt atomic.Int64
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(wctx, func() { cutAt.CompareAndSwap(0, verify.Mono()) })
	defer stop()
	if graced {
		grace := tr.cfg.TaskGrace
		go func() {
			select {
			case <-call.Abandoned:
			case <-wctx.Done():
				return
			}
			cut := verify.Mono() + int64(grace)
			t := time.NewTimer(grace)
			defer t.Stop()
			select {
			case <-t.C:
				cutAt.CompareAndSwap(0, cut)
				cancel()
			case <-wctx.Done():
			}
		}()
	}
	proc := fmt.Sprintf("%s/r%d/a%d", call.Execution.Name, call.RedriveCount, call.RetryCount)
	from := verify.Mono()
	wrote, err := tr.env.oc.increment(wctx, l.Lock, proc, l.Token, hold)
	to := verify.Mono()
	if c := cutAt.Load(); c != 0 && c < to {
		to = c // it was stopped there: nothing after counts as its work
	}
	tr.emit(verify.Event{E: "cs", Worker: "sfn", Proc: proc, Owner: call.Execution.Name, Key: l.Lock, Token: l.Token,
		From: from, To: to, Wrote: wrote, T: to})
	switch {
	case err == nil:
	case errors.Is(err, errStale):
		tr.count("stale token refused", 1)
	case wctx.Err() != nil:
		tr.count("work stopped at its bound", 1)
	default:
		tr.logf("%s: %v", proc, err)
	}
	return wrote
}
