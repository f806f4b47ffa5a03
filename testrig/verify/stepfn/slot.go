package stepfn

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/leasehold/leasehold/testrig/aslexec"
	"github.com/leasehold/leasehold/testrig/verify"
)

// slot starts executions one after the other until soft ends, redriving
// aborted and failed ones as the faults say and running the cleanup
// machine after every dead end; at hard, whatever still runs is aborted.
// Even slots run the Lambda machine, odd ones the --task machine.
func (tr *trial) slot(soft, hard context.Context, i int) {
	ex := tr.env.execs[i%len(tr.env.execs)]
	def, cleanup, kind := tr.ms.lambda, tr.ms.lambdaCleanup, "lambda"
	if i%2 == 1 {
		def, cleanup, kind = tr.ms.task, tr.ms.taskCleanup, "task"
	}
	rng := rand.New(rand.NewPCG(tr.cfg.Seed, uint64(i)+1000))
	f := tr.cfg.Faults
	for n := 0; soft.Err() == nil; n++ {
		name := fmt.Sprintf("%s-%s%d-%d", tr.cfg.Lock, kind, i, n)
		x, err := ex.Start(def, "r14-"+kind, name, map[string]any{"slot": i, "n": n})
		if err != nil {
			tr.logf("start %s: %v", name, err)
			return
		}
		tr.count("executions", 1)
		r := tr.wait(hard, x)
		tr.cleanup(ex, cleanup, x, r)
		for red := 0; red < 2 && hard.Err() == nil; red++ {
			p := 0.0
			switch r.Status {
			case aslexec.Aborted:
				p = f.RedriveAborted
			case aslexec.Failed, aslexec.TimedOut:
				p = f.RedriveFailed
			}
			if r.Error == "R14.End" || rng.Float64() >= p {
				break
			}
			select {
			case <-hard.Done():
			case <-time.After(verify.Between(rng, f.RedriveDelay[0], f.RedriveDelay[1])):
			}
			if hard.Err() != nil {
				break
			}
			if err := x.Redrive(); err != nil {
				tr.logf("redrive %s: %v", name, err)
				break
			}
			tr.count("redriven from "+r.State, 1)
			r = tr.wait(hard, x)
			tr.cleanup(ex, cleanup, x, r)
		}
		key := string(r.Status)
		if r.Error != "" {
			key += " " + r.Error
		}
		tr.count(key, 1)
	}
}

// wait waits for the execution's end; at hard it aborts it first.
func (tr *trial) wait(hard context.Context, x *aslexec.Execution) aslexec.Result {
	r, err := x.Wait(hard)
	if err == nil {
		return r
	}
	_ = x.Stop("R14.End", "the trial is over")
	r, _ = x.Wait(context.Background())
	return r
}

// cleanup starts the cleanup machine for an execution that ended FAILED,
// TIMED_OUT or ABORTED, with the event its EventBridge rule would deliver
// ("Step Functions Execution Status Change"; stopDate in epoch
// milliseconds, on the executor's clock).
func (tr *trial) cleanup(ex *aslexec.Executor, def []byte, x *aslexec.Execution, r aslexec.Result) {
	switch r.Status {
	case aslexec.Failed, aslexec.TimedOut, aslexec.Aborted:
	default:
		return
	}
	name := fmt.Sprintf("cleanup-%s-r%d", x.Name, r.RedriveCount)
	c, err := ex.Start(def, "r14-cleanup", name, statusEvent(x, r))
	if err != nil {
		tr.logf("start %s: %v", name, err)
		return
	}
	tr.cleanups.Add(1)
	go func() {
		defer tr.cleanups.Done()
		cr, _ := c.Wait(context.Background())
		out, _ := cr.Output.(map[string]any)
		switch {
		case cr.Status != aslexec.Succeeded:
			tr.logf("%s: %s %s %s", name, cr.Status, cr.Error, cr.Cause)
		case out["released"] == true:
			tr.count("cleanup released", 1)
		default:
			tr.count("cleanup found nothing to release", 1)
		}
	}()
}

// statusEvent is the EventBridge event of an execution's end ("Step
// Functions Execution Status Change"; stopDate in epoch milliseconds, on
// the executor's clock), as the cleanup machine's rule delivers it.
func statusEvent(x *aslexec.Execution, r aslexec.Result) map[string]any {
	h := x.History()
	stop := h[len(h)-1].At
	return map[string]any{
		"source": "aws.states", "detail-type": "Step Functions Execution Status Change",
		"detail": map[string]any{"executionArn": x.ID, "stateMachineArn": x.MachineARN, "status": string(r.Status),
			"stopDate": stop.UnixMilli(), "name": x.Name},
	}
}
