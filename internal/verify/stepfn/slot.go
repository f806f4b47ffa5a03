package stepfn

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/leasehold/leasehold/internal/aslexec"
	"github.com/leasehold/leasehold/internal/verify"
)

// slot starts executions one after the other until soft ends, redriving
// aborted and failed ones as the faults say; at hard, whatever still runs
// is aborted.
func (tr *trial) slot(soft, hard context.Context, i int, def []byte) {
	ex := tr.env.execs[i%len(tr.env.execs)]
	rng := rand.New(rand.NewPCG(tr.cfg.Seed, uint64(i)+1000))
	f := tr.cfg.Faults
	for n := 0; soft.Err() == nil; n++ {
		name := fmt.Sprintf("%s-s%d-%d", tr.cfg.Lock, i, n)
		x, err := ex.Start(def, "r14", name, map[string]any{"slot": i, "n": n})
		if err != nil {
			tr.logf("start %s: %v", name, err)
			return
		}
		tr.nexec.Add(1)
		tr.count("executions", 1)
		r := tr.wait(hard, x)
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
			tr.count(fmt.Sprintf("redriven from %s", r.State), 1)
			r = tr.wait(hard, x)
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
