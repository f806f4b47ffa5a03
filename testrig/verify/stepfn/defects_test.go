package stepfn

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/sfn"
	"github.com/leasehold/leasehold/testrig/aslexec"
	"github.com/leasehold/leasehold/testrig/verify"
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

// TestR17RetriedServiceErrorKeepsLock (issue 25, item 2): with the
// recommended Retry on Lambda.ServiceException, the first attempt fails
// with it while the function runs on; the retry fails with an ordinary
// error. The lock stays held until the first attempt's function cannot
// run any more (its timeout): a waiting execution runs its task only then.
// It used to be released at the ordinary error, while the function ran.
func TestR17RetriedServiceErrorKeepsLock(t *testing.T) {
	t.Parallel()
	s := newScenario(t, time.Second)
	task, _ := json.Marshal(map[string]any{"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke",
		"Arguments": map[string]any{"FunctionName": FunctionARN, "Payload": map[string]any{"leasehold": "{% $leasehold %}"}},
		"Output":    "{% $states.result.Payload %}",
		"Retry":     []any{map[string]any{"ErrorEquals": []string{"Lambda.ServiceException"}, "IntervalSeconds": 1, "MaxAttempts": 1}}})
	def := s.generate(sfn.Config{Table: s.table, Lock: s.lock, Task: task, LambdaTimeout: lambdaTimeout, TTL: 30 * time.Second, MaxDelay: 2 * time.Second})
	started := make(chan struct{})
	s.plan["first/r0/a0"] = behaviour{hold: time.Minute, early: true, started: started,
		fail: &aslexec.Failure{Name: "Lambda.ServiceException", Cause: "the service failed; the function runs on"}}
	s.plan["first/r0/a1"] = behaviour{hold: -1, fail: &aslexec.Failure{Name: "Error", Cause: "an ordinary error"}}
	first := s.start(def, "first")
	<-started
	second := s.start(def, "second")
	if r := s.wait(first); r.Status != aslexec.Failed || r.Error != "Error" {
		t.Errorf("first: %+v, want FAILED with the retry's error", r)
	}
	if r := s.wait(second); r.Status != aslexec.Succeeded {
		t.Errorf("second: %+v", r)
	}
	reportR17(t, "lambda", "service error, retried", s.check(2))
}

// TestR17TaskServiceErrorKeepsLock (issue 25, item 4): a --task whose
// integration fails with a service error (an ECS or Batch exception)
// while the work it started goes on keeps the lock for the task's grace
// unless the error is declared final; a waiting execution runs its task
// only after the work cannot run. It used to be released at once.
func TestR17TaskServiceErrorKeepsLock(t *testing.T) {
	t.Parallel()
	s := newScenario(t, 2*time.Second)
	def := s.generate(s.taskConfig(30*time.Second, 10))
	started := make(chan struct{})
	s.plan["first/r0"] = behaviour{hold: time.Minute, early: true, started: started,
		fail: &aslexec.Failure{Name: "Batch.AWSBatchException", Cause: "the service failed; the job runs on"}}
	first := s.start(def, "first")
	<-started
	second := s.start(def, "second")
	if r := s.wait(first); r.Status != aslexec.Failed || r.Error != "Batch.AWSBatchException" {
		t.Errorf("first: %+v, want FAILED with the service error", r)
	}
	if r := s.wait(second); r.Status != aslexec.Succeeded {
		t.Errorf("second: %+v", r)
	}
	reportR17(t, "task", "service error", s.check(2))
}

// TestR17ClientExecutionTimeoutKeepsLock (issue 25, item 1): the Lambda
// invoke fails with Lambda.ClientExecutionTimeoutException while the
// function runs on (until its own timeout kills it). The lock stays held
// until the function cannot run any more; a waiting execution runs its
// task only then. It used to be released at once.
func TestR17ClientExecutionTimeoutKeepsLock(t *testing.T) {
	t.Parallel()
	s := newScenario(t, time.Second)
	def := s.generate(s.lambdaConfig(30 * time.Second))
	started := make(chan struct{})
	s.plan["first/r0"] = behaviour{hold: time.Minute, early: true, started: started,
		fail: &aslexec.Failure{Name: "Lambda.ClientExecutionTimeoutException", Cause: "the invoke timed out; the function runs on"}}
	first := s.start(def, "first")
	<-started
	second := s.start(def, "second")
	if r := s.wait(first); r.Status != aslexec.Failed || r.Error != "Lambda.ClientExecutionTimeoutException" {
		t.Errorf("first: %+v, want FAILED with Lambda.ClientExecutionTimeoutException", r)
	}
	if r := s.wait(second); r.Status != aslexec.Succeeded {
		t.Errorf("second: %+v", r)
	}
	reportR17(t, "lambda", "client execution timeout", s.check(2))
}

// reportR17 reports an issue-25 scenario as a row of suite R17 (the
// holder's side, on every surface; testrig/verify/holders): the machine
// holds the lock through its task's error while the work may run on, so
// the waiting execution's task must not overlap it, and its token must be
// above it. evs are the scenario's critical sections (scenario.check).
func reportR17(t *testing.T, machine, fault string, evs []verify.Event) {
	t.Helper()
	res := verify.Check(&verify.History{Events: evs}, verify.CheckOptions{NoLinearizability: true})
	disorder, _ := tokenOrder(evs)
	violations := res.Overlaps + disorder
	if len(evs) != 2 {
		violations++ // scenario.check has failed the test already
	}
	checker := "ok"
	if violations > 0 {
		checker = "violations"
	}
	note := fmt.Sprintf("%d critical sections, %d overlaps, %d tokens out of order", len(evs), res.Overlaps, disorder)
	if len(evs) == 2 {
		a, b := evs[0], evs[1]
		if b.From < a.From {
			a, b = b, a
		}
		note += fmt.Sprintf("; the first task's work ran %s (on after the error), the waiting execution's began %s after it ended",
			time.Duration(a.To-a.From).Round(time.Millisecond), time.Duration(b.From-a.To).Round(time.Millisecond))
	}
	verify.Report(t, verify.Row{Suite: "R17", Store: "sfn(" + machine + ") " + fault, Ops: len(evs), Faults: 1,
		Violations: violations, Checker: checker, Note: note})
}
