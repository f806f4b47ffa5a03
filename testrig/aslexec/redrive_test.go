package aslexec

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestRedriveFromFailedState(t *testing.T) {
	var first, second atomic.Int32
	var mu sync.Mutex
	var seen []map[string]any
	e := newExecutor(t, Options{Lambdas: map[string]Lambda{
		"first": {Fn: func(ctx context.Context, call Call, payload any) (any, error) {
			first.Add(1)
			return map[string]any{"from": "first"}, nil
		}},
		"second": {Fn: func(ctx context.Context, call Call, payload any) (any, error) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, payload.(map[string]any))
			if second.Add(1) == 1 {
				return nil, Fail("Boom", "the first run fails")
			}
			return "done", nil
		}},
	}})
	def := machineDef(t, "Init", map[string]any{
		"Init": map[string]any{"Type": "Pass", "Assign": map[string]any{"n": 1}, "Next": "First"},
		"First": map[string]any{"Type": "Task", "Resource": "arn:aws:lambda:us-east-1:123456789012:function:first",
			"Arguments": map[string]any{}, "Assign": map[string]any{"n": "{% $n + 1 %}", "got": "{% $states.result.from %}"},
			"Output": "{% {'carried': $states.input.x} %}", "Next": "Second"},
		"Second": map[string]any{"Type": "Task", "Resource": "arn:aws:lambda:us-east-1:123456789012:function:second",
			"Arguments": map[string]any{"n": "{% $n %}", "got": "{% $got %}", "in": "{% $states.input %}",
				"id": "{% $states.context.Execution.Id %}", "redrives": "{% $states.context.Execution.RedriveCount %}"},
			"Assign": map[string]any{"n": 100}, "End": true},
	})
	x, r := run(t, e, def, "redrive", map[string]any{"x": "input"})
	if r.Status != Failed || r.State != "Second" || r.Error != "Boom" || r.RedriveCount != 0 {
		t.Fatalf("first run: %+v", r)
	}
	if err := x.Redrive(); err != nil {
		t.Fatal(err)
	}
	r = wait(t, x)
	if r.Status != Succeeded || r.Output != "done" || r.RedriveCount != 1 {
		t.Fatalf("after the redrive: %+v", r)
	}
	if first.Load() != 1 {
		t.Errorf("the state before the failed one ran %d times, want 1 (redrive starts at the failed state)", first.Load())
	}
	if len(seen) != 2 {
		t.Fatalf("the failed state ran %d times, want 2", len(seen))
	}
	for i, p := range seen {
		if p["n"] != float64(2) || p["got"] != "first" || fmt.Sprint(p["in"]) != "map[carried:input]" || p["id"] != x.ID {
			t.Errorf("run %d of the failed state saw %v: want the variables and input it was entered with, and the same execution id", i, p)
		}
		if p["redrives"] != float64(i) {
			t.Errorf("run %d saw RedriveCount %v", i, p["redrives"])
		}
	}
	if n := len(events(x, EvRedriven)); n != 1 {
		t.Errorf("%d ExecutionRedriven events", n)
	}
	if err := x.Redrive(); !errors.Is(err, ErrNotRedrivable) {
		t.Errorf("redrive of a succeeded execution: %v, want ErrNotRedrivable", err)
	}
}

func TestAbortLeavesTaskRunning(t *testing.T) {
	var calls atomic.Int32
	inside := make(chan struct{}, 2)
	release := make(chan struct{})
	var done atomic.Int32
	e := newExecutor(t, Options{Lambdas: map[string]Lambda{"body": {Fn: func(ctx context.Context, call Call, payload any) (any, error) {
		n := calls.Add(1)
		inside <- struct{}{}
		if n == 1 {
			<-release
			done.Add(1)
		}
		return "ok", nil
	}}}})
	def := machineDef(t, "Before", map[string]any{
		"Before": map[string]any{"Type": "Pass", "Next": "T"},
		"T":      task("body", map[string]any{"End": true}),
	})
	x, err := e.Start(def, "m", "abort", nil)
	if err != nil {
		t.Fatal(err)
	}
	<-inside
	if err := x.Stop("Operator", "stopped by the test"); err != nil {
		t.Fatal(err)
	}
	r := wait(t, x)
	if r.Status != Aborted || r.State != "T" || r.Error != "Operator" {
		t.Fatalf("result %+v, want ABORTED in T", r)
	}
	if done.Load() != 0 {
		t.Fatal("the task ended before the abort took effect")
	}
	if err := x.Stop("again", ""); err == nil {
		t.Error("Stop of an ended execution succeeded")
	}
	// A redrive of the aborted execution runs the task again, while the
	// first invocation is still going.
	if err := x.Redrive(); err != nil {
		t.Fatal(err)
	}
	r = wait(t, x)
	if r.Status != Succeeded || calls.Load() != 2 || done.Load() != 0 {
		t.Errorf("after the redrive: %+v, %d calls, first done %d", r, calls.Load(), done.Load())
	}
	close(release)
}

func TestAssignScoping(t *testing.T) {
	e := newExecutor(t, Options{})
	def := machineDef(t, "A", map[string]any{
		"A": map[string]any{"Type": "Pass", "Assign": map[string]any{"x": 5}, "Next": "B"},
		// Assign and Output see the variables as they were before B.
		"B": map[string]any{"Type": "Pass", "Assign": map[string]any{"x": 1, "y": "{% $x %}"},
			"Output": "{% {'x': $x, 'y': $exists($y)} %}", "Next": "C"},
		"C": map[string]any{"Type": "Choice", "Choices": []any{
			map[string]any{"Condition": "{% $x = 1 and $y = 5 %}", "Next": "D", "Assign": map[string]any{"z": "{% $states.input.x %}"}},
		}, "Default": "Wrong"},
		"D":     map[string]any{"Type": "Succeed", "Output": "{% {'x': $x, 'y': $y, 'z': $z, 'in': $states.input} %}"},
		"Wrong": map[string]any{"Type": "Fail", "Error": "Wrong", "Cause": "{% $string($x) & ' ' & $string($y) %}"},
	})
	_, r := run(t, e, def, "assign", nil)
	if r.Status != Succeeded {
		t.Fatalf("result %+v", r)
	}
	want := "map[in:map[x:5 y:false] x:1 y:5 z:5]"
	if got := fmt.Sprint(r.Output); got != want {
		t.Errorf("output %s, want %s", got, want)
	}
}

func TestExecutionTimeout(t *testing.T) {
	e := newExecutor(t, Options{})
	def := machineDef(t, "W", map[string]any{
		"W":    map[string]any{"Type": "Wait", "Seconds": "{% $states.context.Execution.RedriveCount = 0 ? 100 : 1 %}", "Next": "Done"},
		"Done": map[string]any{"Type": "Succeed"},
	}, "TimeoutSeconds", 5)
	x, r := run(t, e, def, "timeout", nil)
	if r.Status != TimedOut || r.Error != "States.Timeout" || r.State != "W" {
		t.Fatalf("result %+v, want TIMED_OUT in W", r)
	}
	if err := x.Redrive(); err != nil {
		t.Fatal(err)
	}
	if r = wait(t, x); r.Status != Succeeded {
		t.Errorf("after the redrive: %+v", r)
	}
}

func TestEvaluationErrors(t *testing.T) {
	e := newExecutor(t, Options{})
	for name, st := range map[string]map[string]any{
		"undefined cause": {"Type": "Fail", "Error": "E", "Cause": "{% $e.Cause %}"},
		"throws":          {"Type": "Pass", "Output": "{% $power(2, 2000) %}", "End": true},
		"not boolean":     {"Type": "Choice", "Choices": []any{map[string]any{"Condition": "{% 1 %}", "Next": "S"}}},
	} {
		def := machineDef(t, "X", map[string]any{"X": st, "S": map[string]any{"Type": "Succeed"}})
		_, r := run(t, e, def, strings.ReplaceAll(name, " ", "-"), nil)
		if r.Status != Failed || r.Error != "States.QueryEvaluationError" {
			t.Errorf("%s: %+v, want States.QueryEvaluationError", name, r)
		}
	}
}

func TestUnsupportedRefused(t *testing.T) {
	e := newExecutor(t, Options{})
	for name, def := range map[string][]byte{
		"map":      machineDef(t, "M", map[string]any{"M": map[string]any{"Type": "Map", "End": true}}),
		"jsonpath": []byte(`{"StartAt":"P","States":{"P":{"Type":"Pass","End":true}}}`),
		"field":    machineDef(t, "P", map[string]any{"P": map[string]any{"Type": "Pass", "ResultPath": "$.x", "End": true}}),
		"dangling": machineDef(t, "P", map[string]any{"P": map[string]any{"Type": "Pass", "Next": "Nowhere"}}),
	} {
		if _, err := e.Start(def, "m", name, nil); err == nil {
			t.Errorf("%s: started", name)
		}
	}
}

// TestManyExecutions runs executions at once through one evaluator: each
// gets its own answers.
func TestManyExecutions(t *testing.T) {
	e := newExecutor(t, Options{})
	def := machineDef(t, "A", map[string]any{
		"A": map[string]any{"Type": "Pass", "Assign": map[string]any{"v": "{% $states.input.i * 2 %}"}, "Next": "B"},
		"B": map[string]any{"Type": "Wait", "Seconds": 1, "Next": "C"},
		"C": map[string]any{"Type": "Succeed", "Output": "{% $v + 1 %}"},
	})
	const n = 200
	start := time.Now()
	xs := make([]*Execution, n)
	for i := range xs {
		x, err := e.Start(def, "m", fmt.Sprint("x", i), map[string]any{"i": i})
		if err != nil {
			t.Fatal(err)
		}
		xs[i] = x
	}
	for i, x := range xs {
		if r := wait(t, x); r.Status != Succeeded || r.Output != float64(2*i+1) {
			t.Errorf("execution %d: %+v", i, r)
		}
	}
	t.Logf("%d executions of 3 states in %v", n, time.Since(start).Round(time.Millisecond))
}

func TestCloseAbortsRunning(t *testing.T) {
	e := newExecutor(t, Options{})
	def := machineDef(t, "W", map[string]any{"W": map[string]any{"Type": "Wait", "Seconds": 100000, "End": true}})
	x, err := e.Start(def, "m", "long", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if r := wait(t, x); r.Status != Aborted || r.Error != "aslexec.Closed" || r.State != "W" {
		t.Errorf("after Close: %+v, want ABORTED in W", r)
	}
}

// TestOnEventStops: the hook sees the history as it happens and may stop
// the execution from there.
func TestOnEventStops(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	e := newExecutor(t, Options{OnEvent: func(x *Execution, ev Event) {
		mu.Lock()
		seen = append(seen, ev.Type+" "+ev.State)
		mu.Unlock()
		if ev.Type == EvStateEntered && ev.State == "W" {
			x.Stop("Hook", "stopped on entering W")
		}
	}})
	def := machineDef(t, "P", map[string]any{
		"P": map[string]any{"Type": "Pass", "Next": "W"},
		"W": map[string]any{"Type": "Wait", "Seconds": 100000, "End": true},
	})
	_, r := run(t, e, def, "hook", nil)
	if r.Status != Aborted || r.State != "W" || r.Error != "Hook" {
		t.Errorf("result %+v, want ABORTED in W", r)
	}
	mu.Lock()
	defer mu.Unlock()
	want := "[ExecutionStarted  StateEntered P StateExited P StateEntered W ExecutionAborted W]"
	if got := fmt.Sprint(seen); got != want {
		t.Errorf("events %s, want %s", got, want)
	}
}
