package stepfn

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/aslexec"
	"github.com/leasehold/leasehold/sfn"
)

// TestR14RedriveReacquires: an execution stopped while its Lambda function
// runs (the function goes on) and redriven at once must not run the task
// again with the old grant beside the first run: it waits until the first
// run cannot go on, acquires again and runs with a new token.
func TestR14RedriveReacquires(t *testing.T) {
	t.Parallel()
	s := newScenario(t, time.Second)
	def := s.generate(s.lambdaConfig(16 * time.Second))
	s.plan["x/r0"] = behaviour{hold: 1500 * time.Millisecond, abortAfter: 200 * time.Millisecond}
	x := s.start(def, "x")
	if r := s.wait(x); r.Status != aslexec.Aborted || r.State != sfn.StateTask {
		t.Fatalf("first run: %+v, want ABORTED in %s", r, sfn.StateTask)
	}
	if err := x.Redrive(); err != nil {
		t.Fatal(err)
	}
	if r := s.wait(x); r.Status != aslexec.Succeeded {
		t.Errorf("redriven run: %+v", r)
	}
	if evs := s.check(2); len(evs) == 2 && evs[1].Token <= evs[0].Token {
		t.Errorf("the redriven task ran with token %d after the first run's %d: want a new grant", evs[1].Token, evs[0].Token)
	}
}

// TestR14TimeoutKeepsLock: a --task whose state times out while its work
// goes on (up to the declared grace) keeps the lock until the work cannot
// run any more; a waiting execution gets it only then.
func TestR14TimeoutKeepsLock(t *testing.T) {
	t.Parallel()
	s := newScenario(t, 2500*time.Millisecond) // the machine holds ceil(2.5 s) = 3 s
	def := s.generate(s.taskConfig(16*time.Second, 2))
	started := make(chan struct{})
	s.plan["first/r0"] = behaviour{hold: 10 * time.Second, started: started}
	first := s.start(def, "first")
	<-started
	second := s.start(def, "second")
	if r := s.wait(first); r.Status != aslexec.Failed || r.Error != "States.Timeout" {
		t.Errorf("first: %+v, want FAILED with States.Timeout", r)
	}
	if r := s.wait(second); r.Status != aslexec.Succeeded {
		t.Errorf("second: %+v", r)
	}
	s.check(2)
}

// TestR14TaskErrorWithoutCause: a task that fails with an error that has
// no cause makes the execution fail with that error (not with an
// evaluation error of the machine's own Fail state).
func TestR14TaskErrorWithoutCause(t *testing.T) {
	t.Parallel()
	s := newScenario(t, time.Second)
	def := s.generate(s.taskConfig(16*time.Second, 5))
	s.plan["x/r0"] = behaviour{fail: &aslexec.Failure{Name: "My.Error"}}
	if r := s.wait(s.start(def, "x")); r.Status != aslexec.Failed || r.Error != "My.Error" {
		t.Errorf("result %+v, want FAILED with My.Error", r)
	}
	s.check(1)
}

// TestR14CleanupReleases: the lock of an execution stopped while its task
// ran is released by the cleanup machine (started as the EventBridge rule
// would) once the task cannot run any more — long before the lease would
// expire — and another execution gets it then.
func TestR14CleanupReleases(t *testing.T) {
	t.Parallel()
	s := newScenario(t, time.Second)
	c := s.lambdaConfig(10 * time.Minute)
	def := s.generate(c)
	cleanup, err := sfn.Cleanup(c)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := c.Plan()
	if err != nil {
		t.Fatal(err)
	}
	s.plan["dead/r0"] = behaviour{hold: 500 * time.Millisecond, abortAfter: 100 * time.Millisecond}
	dead := s.start(def, "dead")
	r := s.wait(dead)
	if r.Status != aslexec.Aborted {
		t.Fatalf("dead: %+v", r)
	}
	stopped := time.Now()
	cl, err := s.ex.Start(cleanup, "cleanup", "cleanup-dead", statusEvent(dead, r))
	if err != nil {
		t.Fatal(err)
	}
	next := s.start(def, "next")
	if r := s.wait(next); r.Status != aslexec.Succeeded {
		t.Errorf("next: %+v", r)
	}
	took := time.Since(stopped)
	if cr := s.wait(cl); cr.Status != aslexec.Succeeded || cr.Output.(map[string]any)["released"] != true {
		t.Errorf("cleanup: %+v, want it to release the lock", cr)
	}
	if took < plan.Hold || took > plan.Hold+time.Minute {
		t.Errorf("the next execution got the lock %s after the abort, want after the hold %s and long before the TTL %s", took, plan.Hold, c.TTL)
	}
	s.check(2)
}
