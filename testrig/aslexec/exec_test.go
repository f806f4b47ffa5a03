package aslexec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// fast is the rate of the tests' clocks: 50 times real time, so a 1 s
// retry interval takes 20 ms. Tests assert on order and counts only.
const fast = 49

func newExecutor(t *testing.T, opt Options) *Executor {
	t.Helper()
	if opt.Clock == nil {
		opt.Clock = clock.NewSkewed(fast)
	}
	e, err := New(opt)
	if errors.Is(err, ErrNoNode) {
		enginetest.Missing(t, "node and the npm package jsonata", err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// machine builds a JSONata machine from its states.
func machineDef(t *testing.T, startAt string, states map[string]any, extra ...any) []byte {
	t.Helper()
	m := map[string]any{"QueryLanguage": "JSONata", "StartAt": startAt, "States": states}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i].(string)] = extra[i+1]
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func run(t *testing.T, e *Executor, def []byte, name string, input any) (*Execution, Result) {
	t.Helper()
	x, err := e.Start(def, "m", name, input)
	if err != nil {
		t.Fatal(err)
	}
	return x, wait(t, x)
}

func wait(t *testing.T, x *Execution) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := x.Wait(ctx)
	if err != nil {
		t.Fatalf("%s: %v", x.Name, err)
	}
	return r
}

func events(x *Execution, typ string) []Event {
	var out []Event
	for _, ev := range x.History() {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

// recorder is a Lambda that records its payloads and fails its first
// failures calls with the error name fail.
type recorder struct {
	mu       sync.Mutex
	payloads []any
	fail     string
	failures int
}

func (r *recorder) lambda() Lambda {
	return Lambda{Fn: func(ctx context.Context, call Call, payload any) (any, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.payloads = append(r.payloads, payload)
		if len(r.payloads) <= r.failures {
			return nil, Fail(r.fail, fmt.Sprintf("failure %d", len(r.payloads)))
		}
		return map[string]any{"ok": true, "n": len(r.payloads)}, nil
	}}
}

func (r *recorder) calls() []any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]any(nil), r.payloads...)
}

func task(fn string, extra map[string]any) map[string]any {
	st := map[string]any{"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke",
		"Arguments": map[string]any{"FunctionName": "arn:aws:lambda:us-east-1:123456789012:function:" + fn,
			"Payload": map[string]any{"retry": "{% $states.context.State.RetryCount %}", "entered": "{% $states.context.State.EnteredTime %}"}},
		"Output": "{% $states.result.Payload %}"}
	for k, v := range extra {
		st[k] = v
	}
	return st
}

func TestRetryBackoff(t *testing.T) {
	rec := &recorder{fail: "Boom", failures: 3}
	e := newExecutor(t, Options{Lambdas: map[string]Lambda{"f": rec.lambda()}})
	def := machineDef(t, "T", map[string]any{"T": task("f", map[string]any{"End": true,
		"Retry": []any{map[string]any{"ErrorEquals": []string{"Boom"}, "IntervalSeconds": 2, "BackoffRate": 3, "MaxAttempts": 3, "MaxDelaySeconds": 10}}})})
	x, r := run(t, e, def, "retry", map[string]any{})
	if r.Status != Succeeded {
		t.Fatalf("result %+v, want SUCCEEDED after 3 retries", r)
	}
	var delays []time.Duration
	for _, ev := range events(x, EvRetry) {
		delays = append(delays, ev.Delay)
	}
	want := []time.Duration{2 * time.Second, 6 * time.Second, 10 * time.Second} // 18 s capped at 10
	if fmt.Sprint(delays) != fmt.Sprint(want) {
		t.Errorf("retry intervals %v, want %v", delays, want)
	}
	calls := rec.calls()
	if len(calls) != 4 {
		t.Fatalf("%d attempts, want 4", len(calls))
	}
	for i, c := range calls {
		p := c.(map[string]any)
		if p["retry"] != float64(i) {
			t.Errorf("attempt %d saw RetryCount %v", i, p["retry"])
		}
		if p["entered"] != calls[0].(map[string]any)["entered"] {
			t.Errorf("attempt %d saw EnteredTime %v, first %v: want it constant across retries", i, p["entered"], calls[0].(map[string]any)["entered"])
		}
	}

	// One more failure than MaxAttempts allows: the execution fails with
	// the task's error after exactly MaxAttempts retries.
	rec2 := &recorder{fail: "Boom", failures: 10}
	e.opt.Lambdas["g"] = rec2.lambda()
	def = machineDef(t, "T", map[string]any{"T": task("g", map[string]any{"End": true,
		"Retry": []any{
			map[string]any{"ErrorEquals": []string{"Boom"}, "IntervalSeconds": 1, "MaxAttempts": 2},
			map[string]any{"ErrorEquals": []string{"States.ALL"}, "IntervalSeconds": 1, "MaxAttempts": 5}, // not used: the first match counts
		}})})
	_, r = run(t, e, def, "exhausted", nil)
	if r.Status != Failed || r.Error != "Boom" || r.State != "T" {
		t.Errorf("result %+v, want FAILED with Boom in T", r)
	}
	if n := len(rec2.calls()); n != 3 {
		t.Errorf("%d attempts, want 3 (MaxAttempts 2 of the first matching retrier)", n)
	}
}

func TestRetryJitter(t *testing.T) {
	rec := &recorder{fail: "Boom", failures: 4}
	e := newExecutor(t, Options{Lambdas: map[string]Lambda{"f": rec.lambda()}})
	def := machineDef(t, "T", map[string]any{"T": task("f", map[string]any{"End": true,
		"Retry": []any{map[string]any{"ErrorEquals": []string{"States.ALL"}, "IntervalSeconds": 4, "MaxAttempts": 4, "JitterStrategy": "FULL"}}})})
	x, r := run(t, e, def, "jitter", nil)
	if r.Status != Succeeded {
		t.Fatalf("result %+v", r)
	}
	var distinct = map[time.Duration]bool{}
	for i, ev := range events(x, EvRetry) {
		limit := time.Duration(4<<i) * time.Second
		if ev.Delay < 0 || ev.Delay > limit {
			t.Errorf("retry %d waited %v, want within [0, %v]", i+1, ev.Delay, limit)
		}
		distinct[ev.Delay] = true
	}
	if len(distinct) < 2 {
		t.Errorf("FULL jitter gave the same interval every time: %v", distinct)
	}
}

func TestCatchOrder(t *testing.T) {
	slow := Lambda{Fn: func(ctx context.Context, call Call, payload any) (any, error) {
		<-ctx.Done() // until the executor closes: far beyond the state's timeout
		return nil, nil
	}}
	boom := &recorder{fail: "Boom", failures: 100}
	e := newExecutor(t, Options{Lambdas: map[string]Lambda{"boom": boom.lambda(), "slow": slow}})
	catchers := []any{
		map[string]any{"ErrorEquals": []string{"Other"}, "Next": "Other"},
		map[string]any{"ErrorEquals": []string{"States.TaskFailed"}, "Next": "TaskFailed",
			"Assign": map[string]any{"err": "{% $states.errorOutput.Error %}"}},
		map[string]any{"ErrorEquals": []string{"States.ALL"}, "Next": "All", "Output": "{% {'caught': $states.errorOutput.Error} %}"},
	}
	for _, tc := range []struct{ fn, next, out string }{
		{"boom", "TaskFailed", "Boom"},    // TaskFailed matches a task's own error...
		{"slow", "All", "States.Timeout"}, // ...but not a timeout, which States.ALL catches
	} {
		end := func(name string) map[string]any {
			return map[string]any{"Type": "Pass", "End": true,
				"Output": fmt.Sprintf(`{%% {'at': '%s', 'in': $states.input, 'err': $exists($err) ? $err : null} %%}`, name)}
		}
		def := machineDef(t, "T", map[string]any{
			"T":     task(tc.fn, map[string]any{"Next": "Other", "TimeoutSeconds": 2, "Catch": catchers}),
			"Other": end("Other"), "TaskFailed": end("TaskFailed"), "All": end("All"),
		})
		_, r := run(t, e, def, "catch-"+tc.fn, nil)
		out, _ := r.Output.(map[string]any)
		if r.Status != Succeeded || out["at"] != tc.next {
			t.Errorf("%s: result %+v, want the catcher to %s", tc.fn, r, tc.next)
			continue
		}
		in, _ := out["in"].(map[string]any)
		switch tc.next {
		case "TaskFailed": // default Output: the error output; Assign saw it
			if in["Error"] != "Boom" || !strings.Contains(fmt.Sprint(in["Cause"]), "failure") || out["err"] != "Boom" {
				t.Errorf("%s: output %v", tc.fn, out)
			}
		case "All":
			if in["caught"] != tc.out || out["err"] != nil {
				t.Errorf("%s: output %v", tc.fn, out)
			}
		}
	}
}

func TestTimeoutLeavesTaskRunning(t *testing.T) {
	k := clock.NewSkewed(fast)
	var started, finished atomic.Int32
	release := make(chan struct{})
	body := Lambda{Fn: func(ctx context.Context, call Call, payload any) (any, error) {
		started.Add(1)
		<-release // a task that knows nothing of the state's timeout
		finished.Add(1)
		return "late", nil
	}}
	e := newExecutor(t, Options{Clock: k, Lambdas: map[string]Lambda{"body": body}})
	def := machineDef(t, "T", map[string]any{
		"T": task("body", map[string]any{"TimeoutSeconds": 3, "Next": "Done",
			"Catch": []any{map[string]any{"ErrorEquals": []string{"States.ALL"}, "Next": "Failed"}}}),
		"Done":   map[string]any{"Type": "Succeed"},
		"Failed": map[string]any{"Type": "Fail", "Error": "{% $states.input.Error %}", "Cause": "timed out"},
	})
	x, r := run(t, e, def, "timeout", nil)
	if r.Status != Failed || r.Error != "States.Timeout" || r.State != "Failed" {
		t.Fatalf("result %+v, want FAILED with States.Timeout from the Fail state", r)
	}
	if started.Load() != 1 || finished.Load() != 0 {
		t.Fatalf("the task started %d times and finished %d times when the execution ended; want it still running", started.Load(), finished.Load())
	}
	if n := len(events(x, EvTaskTimedOut)); n != 1 {
		t.Errorf("%d TaskTimedOut events, want 1", n)
	}
	close(release)
	for deadline := time.Now().Add(time.Minute); finished.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if finished.Load() != 1 {
		t.Error("the task never finished after the execution ended")
	}
	if r2 := wait(t, x); r2.Status != Failed {
		t.Errorf("the late result changed the execution: %+v", r2)
	}
}

func TestLambdaOwnTimeout(t *testing.T) {
	var cancelled atomic.Bool
	body := Lambda{Timeout: 2 * time.Second, Fn: func(ctx context.Context, call Call, payload any) (any, error) {
		<-ctx.Done() // the sandbox is killed at the function's timeout
		cancelled.Store(true)
		return "never seen", nil
	}}
	e := newExecutor(t, Options{Lambdas: map[string]Lambda{"body": body}})
	def := machineDef(t, "T", map[string]any{"T": task("body", map[string]any{"End": true, "TimeoutSeconds": 60})})
	_, r := run(t, e, def, "sandbox", nil)
	if r.Status != Failed || r.Error != "Sandbox.Timedout" {
		t.Fatalf("result %+v, want Sandbox.Timedout", r)
	}
	for deadline := time.Now().Add(time.Minute); !cancelled.Load() && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if !cancelled.Load() {
		t.Error("the function's context was not cancelled at its timeout")
	}
}

func TestErrorOutputWithoutCause(t *testing.T) {
	e := newExecutor(t, Options{Resources: map[string]TaskFunc{"arn:aws:states:::test:fail": func(ctx context.Context, call Call, args any) (any, error) {
		return nil, Fail(args.(string), "")
	}}})
	def := machineDef(t, "T", map[string]any{
		"T": map[string]any{"Type": "Task", "Resource": "arn:aws:states:::test:fail", "Arguments": "My.Error", "End": true,
			"Catch": []any{map[string]any{"ErrorEquals": []string{"States.ALL"}, "Next": "C"}}},
		"C": map[string]any{"Type": "Succeed", "Output": "{% [$states.input.Error, $exists($states.input.Cause)] %}"},
	})
	_, r := run(t, e, def, "nocause", nil)
	if fmt.Sprint(r.Output) != "[My.Error false]" {
		t.Errorf("result %+v: want the error output without a Cause field", r)
	}
}

// TestHeartbeatTimeout: HeartbeatSeconds fails an attempt whose task stops
// sending heartbeats with States.HeartbeatTimeout, leaving it running; a
// Retry on States.TaskFailed matches that error and starts the task again
// beside the attempt that missed its heartbeat (why sfn refuses that
// retrier with HeartbeatSeconds). A task that keeps sending heartbeats
// outlives HeartbeatSeconds.
func TestHeartbeatTimeout(t *testing.T) {
	var running, maxRunning atomic.Int32
	release := make(chan struct{})
	body := Lambda{Fn: func(ctx context.Context, call Call, payload any) (any, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for m := maxRunning.Load(); n > m && !maxRunning.CompareAndSwap(m, n); m = maxRunning.Load() {
		}
		if call.RetryCount == 0 {
			<-release // the first attempt stops sending heartbeats
			return "late", nil
		}
		return "second", nil
	}}
	e := newExecutor(t, Options{Lambdas: map[string]Lambda{"body": body}})
	def := machineDef(t, "T", map[string]any{
		"T": task("body", map[string]any{"TimeoutSeconds": 60, "HeartbeatSeconds": 3, "End": true,
			"Retry": []any{map[string]any{"ErrorEquals": []string{"States.TaskFailed"}, "MaxAttempts": 1}}}),
	})
	x, r := run(t, e, def, "heartbeat", nil)
	if r.Status != Succeeded {
		t.Fatalf("result %+v, want SUCCEEDED by the retry", r)
	}
	if evs := events(x, EvTaskTimedOut); len(evs) != 1 || evs[0].Error != "States.HeartbeatTimeout" {
		t.Errorf("timed-out events %+v, want one States.HeartbeatTimeout", evs)
	}
	if running.Load() != 1 || maxRunning.Load() != 2 {
		t.Errorf("%d attempts still running, at most %d at once; want the first still running beside the retry (1, 2)", running.Load(), maxRunning.Load())
	}
	close(release)

	// On a fake clock: a heartbeat every 2 s keeps a task with
	// HeartbeatSeconds 3 going for 10 s.
	k := clock.NewFake(time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC))
	step, advanced := make(chan struct{}), make(chan struct{})
	beating := Lambda{Fn: func(ctx context.Context, call Call, payload any) (any, error) {
		for range 5 {
			call.Heartbeat()
			step <- struct{}{}
			<-advanced
		}
		return "done", nil
	}}
	e = newExecutor(t, Options{Clock: k, Lambdas: map[string]Lambda{"beating": beating}})
	def = machineDef(t, "T", map[string]any{"T": task("beating", map[string]any{"HeartbeatSeconds": 3, "End": true})})
	x, err := e.Start(def, "m", "beating", nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		<-step
		k.Advance(2 * time.Second)
		advanced <- struct{}{}
	}
	if r := wait(t, x); r.Status != Succeeded || len(events(x, EvTaskTimedOut)) != 0 {
		t.Errorf("a task sending heartbeats: %+v, %d timeouts; want SUCCEEDED", r, len(events(x, EvTaskTimedOut)))
	}
	def = machineDef(t, "T", map[string]any{"T": task("beating", map[string]any{"HeartbeatSeconds": 5, "TimeoutSeconds": 5, "End": true})})
	if _, r := run(t, e, def, "bad", nil); r.Status != Failed || r.Error != "States.Runtime" {
		t.Errorf("HeartbeatSeconds not below TimeoutSeconds: %+v, want States.Runtime", r)
	}
}

// TestWaitTimestampTruncated: a Wait's Timestamp loses its fraction of a
// second, as Step Functions drops it: a wait until x.999 ends at x.
func TestWaitTimestampTruncated(t *testing.T) {
	k := clock.NewFake(time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC))
	e := newExecutor(t, Options{Clock: k})
	def := machineDef(t, "W", map[string]any{
		"W": map[string]any{"Type": "Wait", "Timestamp": "2026-01-01T10:00:05.999Z", "End": true},
	})
	x, err := e.Start(def, "m", "truncated", nil)
	if err != nil {
		t.Fatal(err)
	}
	k.WaitForTimers(1)
	k.Advance(5 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if r, err := x.Wait(ctx); err != nil || r.Status != Succeeded {
		t.Errorf("5 s into a wait until 5.999 s: %+v, %v; want SUCCEEDED (the fraction dropped)", r, err)
	}
}
