package sfn

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Tests of the defects of issue 14 (items 1, 3 and the list under them),
// each against the generated definition: its JSONata evaluated by the
// reference implementation, its transitions read from the JSON.

type exprCase struct {
	Expr   string         `json:"expr"`
	Vars   map[string]any `json:"vars,omitempty"`
	States map[string]any `json:"states,omitempty"`
	Repeat int            `json:"repeat,omitempty"`
}

type exprResult struct {
	Values []any  `json:"values"`
	Error  string `json:"error"`
}

// evalExprs evaluates each case with the jsonata package (testdata/expr.js).
func evalExprs(t *testing.T, cases []exprCase) []exprResult {
	t.Helper()
	var out []exprResult
	if err := json.Unmarshal(node(t, "expr.js", writeJSON(t, cases)), &out); err != nil {
		t.Fatal(err)
	}
	if len(out) != len(cases) {
		t.Fatalf("%d results for %d cases", len(out), len(cases))
	}
	return out
}

const testExec = "arn:aws:states:eu-west-1:123456789012:execution:m:run-1"

var testEpoch = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

// ctxAt is $states.context for a state entered at testEpoch + at, in an
// execution redriven redrives times (-1: no RedriveCount field, as before
// any redrive).
func ctxAt(at time.Duration, redrives int) map[string]any {
	ex := map[string]any{"Id": testExec}
	if redrives >= 0 {
		ex["RedriveCount"] = redrives
	}
	return map[string]any{"Execution": ex,
		"State": map[string]any{"EnteredTime": testEpoch.Add(at).Format("2006-01-02T15:04:05.000Z")}}
}

func stateOf(t *testing.T, m map[string]any, name string) map[string]any {
	t.Helper()
	st, ok := m["States"].(map[string]any)[name].(map[string]any)
	if !ok {
		t.Fatalf("the machine has no state %s", name)
	}
	return st
}

func condition(t *testing.T, m map[string]any, state string, i int) string {
	t.Helper()
	choices, _ := stateOf(t, m, state)["Choices"].([]any)
	if i >= len(choices) {
		t.Fatalf("%s has %d choices", state, len(choices))
	}
	return choices[i].(map[string]any)["Condition"].(string)
}

func mustConfig(t *testing.T, c Config) (map[string]any, Plan) {
	t.Helper()
	p, err := c.Plan()
	if err != nil {
		t.Fatal(err)
	}
	_, m := generate(t, c)
	return m, p
}

// Item 1: a redriven execution never reaches its task with the old grant.
func TestRedriveReacquires(t *testing.T) {
	m, p := mustConfig(t, lambdaConfig)
	timeout := stateOf(t, m, StateTask)["TimeoutSeconds"]
	expr, ok := timeout.(string)
	if !ok {
		t.Fatalf("the task's TimeoutSeconds is %v: a redrive into the task would run it with the old grant", timeout)
	}
	cover := condition(t, m, StateCheckLease, 0)
	afterErr := condition(t, m, StateAfterTaskError, 0)
	vars := map[string]any{"lh_redrives": 0, "lh_expires": testEpoch.Add(lambdaConfig.TTL).UnixMilli()}
	res := evalExprs(t, []exprCase{
		{Expr: expr, Vars: vars, States: map[string]any{"context": ctxAt(time.Second, -1)}},
		{Expr: expr, Vars: vars, States: map[string]any{"context": ctxAt(time.Second, 0)}},
		{Expr: expr, Vars: vars, States: map[string]any{"context": ctxAt(time.Second, 1)}},
		{Expr: expr, Vars: map[string]any{}, States: map[string]any{"context": ctxAt(time.Second, 1)}},
		{Expr: cover, Vars: vars, States: map[string]any{"context": ctxAt(time.Second, -1)}},
		{Expr: cover, Vars: vars, States: map[string]any{"context": ctxAt(time.Second, 1)}},
		{Expr: afterErr, Vars: vars, States: map[string]any{"context": ctxAt(time.Second, 1)}},
		{Expr: afterErr, Vars: vars, States: map[string]any{"context": ctxAt(time.Second, 0)}},
	})
	for i, r := range res[:2] {
		if r.Error != "" || len(r.Values) != 1 || r.Values[0] != float64(seconds(p.TaskTimeout)) {
			t.Errorf("case %d: not redriven, the task's timeout = %+v, want %d", i, r, seconds(p.TaskTimeout))
		}
	}
	for i, r := range res[2:4] {
		if r.Error == "" {
			t.Errorf("case %d: redriven into the task, its timeout evaluates to %v instead of failing", i+2, r.Values)
		}
	}
	if r := res[4]; r.Error != "" || r.Values[0] != true {
		t.Errorf("CheckLease refuses a fresh grant: %+v", r)
	}
	if r := res[5]; r.Error != "" || r.Values[0] != false {
		t.Errorf("CheckLease lets a redriven execution through: %+v", r)
	}
	if r := res[6]; r.Error != "" || r.Values[0] != true {
		t.Errorf("AfterTaskError does not see the redrive: %+v", r)
	}
	if r := res[7]; r.Error != "" || r.Values[0] != false {
		t.Errorf("AfterTaskError sees a redrive where there is none: %+v", r)
	}
	// The redrive path waits until the earlier attempt's work cannot run:
	// the earlier lease's expiry or the hold from now, whichever is
	// sooner (the hold when the variables are gone), then acquires again.
	hold := stateOf(t, m, StateRedriveHold)
	if hold["Type"] != "Wait" || hold["Next"] != StateRedriven {
		t.Errorf("RedriveHold = %v, want a Wait to %s", hold, StateRedriven)
	}
	ts, _ := hold["Timestamp"].(string)
	at := 10 * time.Minute
	res = evalExprs(t, []exprCase{
		{Expr: ts, Vars: map[string]any{"lh_expires": testEpoch.Add(time.Hour).UnixMilli()}, States: map[string]any{"context": ctxAt(at, 1)}},
		{Expr: ts, Vars: map[string]any{"lh_expires": testEpoch.Add(at + time.Minute).UnixMilli()}, States: map[string]any{"context": ctxAt(at, 1)}},
		{Expr: ts, Vars: map[string]any{}, States: map[string]any{"context": ctxAt(at, 1)}},
	})
	for i, want := range []time.Time{testEpoch.Add(at + p.Hold), testEpoch.Add(at + time.Minute), testEpoch.Add(at + p.Hold)} {
		if r := res[i]; r.Error != "" || r.Values[0] != want.Format("2006-01-02T15:04:05.000Z") {
			t.Errorf("RedriveHold case %d waits until %+v, want %s", i, r, want)
		}
	}
	if got := stateOf(t, m, StateRedriven)["Next"]; got != StateAcquire {
		t.Errorf("Redriven goes to %v, want %s", got, StateAcquire)
	}
	// Only CheckLease leads to the task, only Acquire to CheckLease.
	for name, st := range m["States"].(map[string]any) {
		for _, next := range transitions(st.(map[string]any)) {
			if next == StateTask && name != StateCheckLease || next == StateCheckLease && name != StateAcquire {
				t.Errorf("%s goes to %s", name, next)
			}
		}
	}
}

// transitions lists the states st may go to.
func transitions(st map[string]any) []string {
	var out []string
	add := func(v any) {
		if s, ok := v.(string); ok {
			out = append(out, s)
		}
	}
	add(st["Next"])
	add(st["Default"])
	for _, key := range []string{"Choices", "Catch"} {
		list, _ := st[key].([]any)
		for _, x := range list {
			add(x.(map[string]any)["Next"])
		}
	}
	return out
}

// worstCase reads the task's bound from its state: every attempt's
// timeout and the longest backoff of its Retry.
func worstCase(t *testing.T, task map[string]any, timeout float64) time.Duration {
	t.Helper()
	b, _ := json.Marshal(task["Retry"])
	n, w, err := retryBudget(mustRetry(t, b))
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(float64(n)*timeout)*time.Second + w
}

func mustRetry(t *testing.T, b []byte) any {
	var v any
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// Item 1: the task's total time over all attempts, plus what its work may
// run on after Step Functions stops waiting, ends before the lease can
// expire, counted from the first acquire attempt.
func TestTaskEndsBeforeLeaseExpires(t *testing.T) {
	ecs := json.RawMessage(`{"Type": "Task", "Resource": "arn:aws:states:::ecs:runTask.sync",
		"Arguments": {"Cluster": "c", "TaskDefinition": "t"},
		"Retry": [{"ErrorEquals": ["ECS.AmazonECSException"], "MaxAttempts": 2, "IntervalSeconds": 10}]}`)
	for _, tc := range []struct {
		name    string
		c       Config
		overrun time.Duration // what the work may outlast the state by
	}{
		{"lambda 1h", lambdaConfig, 0},
		{"lambda small TTL", Config{Table: "leasehold", Lock: "l", LambdaARN: lambdaConfig.LambdaARN, LambdaTimeout: 5 * time.Second, TTL: 30 * time.Second}, 0},
		{"ecs with retries", Config{Table: "leasehold", Lock: "l", Task: ecs, TaskGrace: 2 * time.Minute, TTL: 2 * time.Hour}, 2 * time.Minute},
		{"ecs small TTL", Config{Table: "leasehold", Lock: "l", Task: ecs, TaskGrace: 5 * time.Second, TTL: 2 * time.Minute}, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _ := mustConfig(t, tc.c)
			task := stateOf(t, m, StateTask)
			vars := map[string]any{"lh_redrives": 0, "lh_expires": testEpoch.Add(tc.c.TTL).UnixMilli()}
			// The timeout per attempt, as Step Functions evaluates it.
			var timeout float64
			switch v := task["TimeoutSeconds"].(type) {
			case float64:
				timeout = v
			case string:
				r := evalExprs(t, []exprCase{{Expr: v, Vars: vars, States: map[string]any{"context": ctxAt(0, -1)}}})[0]
				timeout, _ = r.Values[0].(float64)
			}
			if tc.c.LambdaARN != "" && time.Duration(timeout)*time.Second < tc.c.LambdaTimeout+LambdaStartAllowance {
				t.Errorf("the state's timeout %vs is shorter than the function's %s + %s: it may time out with the function running",
					timeout, tc.c.LambdaTimeout, LambdaStartAllowance)
			}
			bound := worstCase(t, task, timeout) + tc.overrun
			// The latest the task may start, by CheckLease, and just after.
			cover := condition(t, m, StateCheckLease, 0)
			latest := tc.c.TTL - bound
			res := evalExprs(t, []exprCase{
				{Expr: cover, Vars: vars, States: map[string]any{"context": ctxAt(100*time.Millisecond, -1)}},
				{Expr: cover, Vars: vars, States: map[string]any{"context": ctxAt(latest+time.Millisecond, -1)}},
				// Acquire's own retries (up to ~31 s) before the write.
				{Expr: cover, Vars: vars, States: map[string]any{"context": ctxAt(31*time.Second, -1)}},
			})
			if res[0].Error != "" || res[0].Values[0] != true {
				t.Errorf("CheckLease refuses a task right after the acquire: %+v (bound %s, TTL %s)", res[0], bound, tc.c.TTL)
			}
			if res[1].Error != "" || res[1].Values[0] != false {
				t.Errorf("CheckLease starts a task at %s after the first acquire attempt, whose bound %s ends after the lease (TTL %s): %+v",
					latest+time.Millisecond, bound, tc.c.TTL, res[1])
			}
			if 31*time.Second+bound > tc.c.TTL && (res[2].Error != "" || res[2].Values[0] != false) {
				t.Errorf("CheckLease starts a task 31 s after the acquire whose bound %s does not fit: %+v", bound, res[2])
			}
		})
	}
}

// Item 1: after a task timeout (or a Lambda service error), the lock is
// kept until the work can no longer run; other errors release at once.
func TestHoldAfterTimeout(t *testing.T) {
	m, p := mustConfig(t, lambdaConfig)
	cond := condition(t, m, StateAfterTaskError, 1)
	var cases []exprCase
	// Every Lambda service error AWS's guide names as one after which
	// the function may run (issue 25: Lambda.ClientExecutionTimeoutException
	// released the lock while the function ran on).
	errs := []string{"States.Timeout", "States.HeartbeatTimeout", "Lambda.ClientExecutionTimeoutException", "Lambda.ServiceException",
		"Lambda.AWSLambdaException", "Lambda.SdkClientException", "Sandbox.Timedout", "Boom", "States.TaskFailed", "Lambda.TooManyRequestsException"}
	for _, e := range errs {
		cases = append(cases, exprCase{Expr: cond, Vars: map[string]any{"lh_error": map[string]any{"Error": e}}})
	}
	res := evalExprs(t, cases)
	for i, e := range errs {
		want := i < 6
		if res[i].Error != "" || res[i].Values[0] != want {
			t.Errorf("after %s: hold = %+v, want %v", e, res[i], want)
		}
	}
	hold := stateOf(t, m, StateHoldAfterTimeout)
	if hold["Next"] != StateReleaseAfterFailure {
		t.Errorf("HoldAfterTimeout goes to %v", hold["Next"])
	}
	// Until the work cannot run: the task's bound from its entry, or the
	// function's timeout + 10 s from the error, whichever is sooner.
	if p.Hold != lambdaConfig.LambdaTimeout+LambdaStartAllowance {
		t.Errorf("hold %s, want the Lambda timeout + %s", p.Hold, LambdaStartAllowance)
	}
	catch := stateOf(t, m, StateTask)["Catch"].([]any)[0].(map[string]any)["Assign"].(map[string]any)
	ts, _ := hold["Timestamp"].(string)
	res = evalExprs(t, []exprCase{
		{Expr: catch["lh_task_entered"].(string), States: map[string]any{"context": ctxAt(time.Minute, -1)}},
		// A service error a second after the task started.
		{Expr: ts, Vars: map[string]any{"lh_task_entered": testEpoch.Add(time.Minute).UnixMilli()}, States: map[string]any{"context": ctxAt(time.Minute+time.Second, -1)}},
		// The state's timeout: the bound has passed, the function ended.
		{Expr: ts, Vars: map[string]any{"lh_task_entered": testEpoch.Add(time.Minute).UnixMilli()}, States: map[string]any{"context": ctxAt(time.Minute+p.Bound, -1)}},
	})
	if r := res[0]; r.Error != "" || r.Values[0] != float64(testEpoch.Add(time.Minute).UnixMilli()) {
		t.Errorf("the task's Catch saves its entry as %+v", r)
	}
	for i, want := range []time.Time{testEpoch.Add(time.Minute + p.Bound), testEpoch.Add(time.Minute + p.Bound)} {
		if r := res[i+1]; r.Error != "" || r.Values[0] != want.Format("2006-01-02T15:04:05.000Z") {
			t.Errorf("HoldAfterTimeout case %d waits until %+v, want %s", i, r, want)
		}
	}
	if got := stateOf(t, m, StateAfterTaskError)["Default"]; got != StateReleaseAfterFailure {
		t.Errorf("AfterTaskError's default %v", got)
	}
}

// Item 3 and the list: waiters outlast the holder's task by default; the
// wait grows without overflowing, never passes the deadline, and the
// machine gives up without a last useless wait.
func TestWaitBudget(t *testing.T) {
	c := lambdaConfig
	c.Wait, c.MaxAttempts, c.MaxDelay = 0, 0, 0
	m, p := mustConfig(t, c)
	if p.Wait < c.TTL+p.Bound {
		t.Fatalf("default wait %s, want at least TTL %s + the task's bound %s", p.Wait, c.TTL, p.Bound)
	}
	// The least time MaxAttempts attempts wait, by the wait's lower bound
	// (checked below on the expression).
	var least time.Duration
	for k := 0; k < p.MaxAttempts-1; k++ {
		d := min(p.MaxDelay, time.Duration(1)<<min(k, 20)*time.Second)
		least += (d + time.Second) / 2 / time.Second * time.Second
	}
	if least < p.Wait {
		t.Errorf("%d attempts may wait only %s, less than the wait %s", p.MaxAttempts, least, p.Wait)
	}
	wait := stateOf(t, m, StateWaitForLock)["Seconds"].(string)
	deadline := testEpoch.Add(p.Wait).UnixMilli()
	attempts := []int{0, 1, 2, 5, 10, 1023, 1024, 1100, p.MaxAttempts - 1}
	var cases []exprCase
	for _, k := range attempts {
		cases = append(cases, exprCase{Expr: wait, Repeat: 30,
			Vars: map[string]any{"lh_attempt": k, "lh_deadline": deadline}, States: map[string]any{"context": ctxAt(time.Minute, -1)}})
	}
	// Near the deadline the wait ends at it.
	cases = append(cases, exprCase{Expr: wait, Repeat: 10,
		Vars: map[string]any{"lh_attempt": 30, "lh_deadline": deadline}, States: map[string]any{"context": ctxAt(p.Wait-2500*time.Millisecond, -1)}})
	res := evalExprs(t, cases)
	for i, k := range attempts {
		d := min(seconds(p.MaxDelay), int64(1)<<min(k, 20))
		for _, v := range res[i].Values {
			s, _ := v.(float64)
			if res[i].Error != "" || s < float64((d+1)/2) || s > float64(d) || s != float64(int64(s)) {
				t.Errorf("attempt %d: wait %v (%s), want whole seconds in [%d, %d]", k, v, res[i].Error, (d+1)/2, d)
				break
			}
		}
	}
	for _, v := range res[len(attempts)].Values {
		if v != float64(3) {
			t.Errorf("2.5 s before the deadline the wait is %v s, want 3 (to the deadline)", v)
			break
		}
	}
	// CanRetry, not a wait, follows a refused acquire; it gives up at the
	// attempt limit and when less than a second of the wait is left.
	acq := stateOf(t, m, StateAcquire)["Catch"].([]any)[0].(map[string]any)
	if acq["Next"] != StateCanRetry {
		t.Errorf("a refused acquire goes to %v, want %s (no wait before giving up)", acq["Next"], StateCanRetry)
	}
	if got := stateOf(t, m, StateWaitForLock)["Next"]; got != StateAcquire {
		t.Errorf("WaitForLock goes to %v", got)
	}
	retry := condition(t, m, StateCanRetry, 0)
	res = evalExprs(t, []exprCase{
		{Expr: retry, Vars: map[string]any{"lh_attempt": 0, "lh_deadline": deadline}, States: map[string]any{"context": ctxAt(time.Second, -1)}},
		{Expr: retry, Vars: map[string]any{"lh_attempt": p.MaxAttempts - 1, "lh_deadline": deadline}, States: map[string]any{"context": ctxAt(time.Second, -1)}},
		{Expr: retry, Vars: map[string]any{"lh_attempt": 3, "lh_deadline": deadline}, States: map[string]any{"context": ctxAt(p.Wait-500*time.Millisecond, -1)}},
	})
	for i, want := range []bool{true, false, false} {
		if res[i].Error != "" || res[i].Values[0] != want {
			t.Errorf("CanRetry case %d: %+v, want %v", i, res[i], want)
		}
	}
}

// The list: a failure without a Cause, a failed release, the input key.
func TestFailuresKeepTheTaskError(t *testing.T) {
	m, _ := mustConfig(t, lambdaConfig)
	failed := stateOf(t, m, StateTaskFailed)
	lost := stateOf(t, m, StateLeaseLostAfterFailure)
	noCause := map[string]any{"lh_error": map[string]any{"Error": "Boom"}}
	withCause := map[string]any{"lh_error": map[string]any{"Error": "Boom", "Cause": "disk full"}}
	res := evalExprs(t, []exprCase{
		{Expr: failed["Error"].(string), Vars: noCause},
		{Expr: failed["Cause"].(string), Vars: noCause},
		{Expr: lost["Cause"].(string), Vars: withCause},
		{Expr: lost["Cause"].(string), Vars: noCause},
	})
	if res[0].Error != "" || res[0].Values[0] != "Boom" {
		t.Errorf("TaskFailed's Error = %+v", res[0])
	}
	if s, _ := res[1].Values[0].(string); res[1].Error != "" || s == "" {
		t.Errorf("TaskFailed's Cause without a cause = %+v, want a string", res[1])
	}
	if s, _ := res[2].Values[0].(string); !strings.Contains(s, "Boom") || !strings.Contains(s, "disk full") {
		t.Errorf("LeaseLostAfterFailure's Cause %q drops the task's error", s)
	}
	if s, _ := res[3].Values[0].(string); res[3].Error != "" || !strings.Contains(s, "Boom") {
		t.Errorf("LeaseLostAfterFailure's Cause without a cause = %+v", res[3])
	}
	if lost["Error"] != ErrLeaseLost {
		t.Errorf("LeaseLostAfterFailure's Error %v", lost["Error"])
	}
	rel := stateOf(t, m, StateReleaseAfterFailure)
	var nexts []string
	for _, x := range rel["Catch"].([]any) {
		nexts = append(nexts, x.(map[string]any)["Next"].(string))
	}
	if fmt.Sprint(nexts) != fmt.Sprint([]string{StateLeaseLostAfterFailure, StateTaskFailed}) {
		t.Errorf("ReleaseAfterFailure's catchers go to %v: a failed release must keep the task's error", nexts)
	}

	check := condition(t, m, StateCheckInput, 0)
	inputs := []any{map[string]any{"a": 1}, map[string]any{}, map[string]any{"leasehold": 1}, "plain", []any{1}}
	var cases []exprCase
	for _, in := range inputs {
		cases = append(cases, exprCase{Expr: check, States: map[string]any{"input": in}})
	}
	res = evalExprs(t, cases)
	for i, want := range []bool{true, true, false, false, false} {
		if res[i].Error != "" || res[i].Values[0] != want {
			t.Errorf("CheckInput(%v) = %+v, want %v", inputs[i], res[i], want)
		}
	}
	if got := stateOf(t, m, StateInvalidInput)["Error"]; got != ErrInvalidInput {
		t.Errorf("InvalidInput fails with %v", got)
	}
}

// The list: lock names follow the store's rules and are never evaluated;
// --task users get the fencing token.
func TestLockNameAndToken(t *testing.T) {
	for _, name := range []string{`{% $x %}`, `{%"}%}`, `a"b\c`, "ü-é"} {
		c := lambdaConfig
		c.Lock = name
		m, _ := mustConfig(t, c)
		key := stateOf(t, m, StateAcquire)["Arguments"].(map[string]any)["Key"].(map[string]any)["LockKey"].(map[string]any)["S"].(string)
		r := evalExprs(t, []exprCase{{Expr: key}})[0]
		if r.Error != "" || r.Values[0] != name {
			t.Errorf("lock %q: the key evaluates to %+v", name, r)
		}
	}
	task := taskConfig
	task.Task = json.RawMessage(`{"Type": "Task", "Resource": "arn:aws:states:::ecs:runTask.sync",
		"Arguments": {"Cluster": "c", "Overrides": {"Token": "{% $string($leasehold.token) %}"}}}`)
	m, _ := mustConfig(t, task)
	acq, _ := stateOf(t, m, StateAcquire)["Assign"].(map[string]any)["leasehold"].(string)
	arg, _ := dig(stateOf(t, m, StateTask), "Arguments", "Overrides", "Token").(string)
	if acq == "" || arg == "" {
		t.Fatalf("Acquire assigns no $leasehold (%q), or the task's Arguments lost it (%q)", acq, arg)
	}
	res := evalExprs(t, []exprCase{{Expr: acq, States: map[string]any{"context": ctxAt(0, -1),
		"result": map[string]any{"Attributes": map[string]any{"Token": map[string]any{"N": "17"}}}}}})
	lh := res[0].Values[0]
	if dig(lh, "token") != float64(17) || dig(lh, "lock") != "batch" || dig(lh, "owner") != testExec {
		t.Fatalf("$leasehold = %v", lh)
	}
	if r := evalExprs(t, []exprCase{{Expr: arg, Vars: map[string]any{"leasehold": lh}}})[0]; r.Error != "" || r.Values[0] != "17" {
		t.Errorf("the task's Arguments see the token as %+v", r)
	}
}

// A task's timeout with a grace: the lock is kept the grace after the
// timeout, not the whole bound.
func TestHoldAfterTaskTimeout(t *testing.T) {
	m, p := mustConfig(t, Config{Table: "leasehold", Lock: "l", TaskGrace: 2 * time.Minute, TTL: 2 * time.Hour,
		Task: json.RawMessage(`{"Type": "Task", "Resource": "arn:aws:states:::ecs:runTask.sync", "Arguments": {},
			"Retry": [{"ErrorEquals": ["ECS.AmazonECSException"], "MaxAttempts": 2}]}`)})
	ts := stateOf(t, m, StateHoldAfterTimeout)["Timestamp"].(string)
	entered := testEpoch.Add(time.Minute)
	failedAt := p.TaskTimeout // the first attempt timed out
	r := evalExprs(t, []exprCase{{Expr: ts, Vars: map[string]any{"lh_task_entered": entered.UnixMilli()},
		States: map[string]any{"context": ctxAt(time.Minute+failedAt, -1)}}})[0]
	if want := entered.Add(failedAt + 2*time.Minute).Format("2006-01-02T15:04:05.000Z"); r.Error != "" || r.Values[0] != want {
		t.Errorf("after the first attempt's timeout the hold ends %+v, want %s (the grace later)", r, want)
	}
	if p.Bound+p.AcquireAllowance+2*time.Minute/10 > 2*time.Hour {
		t.Errorf("bound %s does not fit", p.Bound)
	}
}

// The cleanup machine waits the hold after the execution stopped, then
// releases only that execution's grant from before it stopped.
func TestCleanupMachine(t *testing.T) {
	_, m := made(t, Cleanup, lambdaConfig)
	var v validation
	if err := json.Unmarshal(node(t, "validate.js", writeJSON(t, m)), &v); err != nil {
		t.Fatal(err)
	}
	if !v.IsValid {
		t.Errorf("asl-validator rejects the cleanup machine: %v", v.Errors)
	}
	stopped := testEpoch.Add(time.Minute)
	event := map[string]any{"detail": map[string]any{"executionArn": testExec, "status": "ABORTED", "stopDate": stopped.UnixMilli()}}
	p, _ := lambdaConfig.Plan()
	ts := stateOf(t, m, CleanupStateHold)["Timestamp"].(string)
	rel := stateOf(t, m, CleanupStateRelease)
	vals := dig(rel, "Arguments", "ExpressionAttributeValues").(map[string]any)
	res := evalExprs(t, []exprCase{
		{Expr: ts, States: map[string]any{"input": event}},
		{Expr: dig(vals, ":dead", "S").(string), States: map[string]any{"input": event}},
		{Expr: dig(vals, ":stopped", "N").(string), States: map[string]any{"input": event}},
		{Expr: ts, States: map[string]any{"input": map[string]any{"detail": map[string]any{}}}},
	})
	if want := stopped.Add(p.Hold).Format("2006-01-02T15:04:05.000Z"); res[0].Error != "" || res[0].Values[0] != want {
		t.Errorf("the cleanup waits until %+v, want %s", res[0], want)
	}
	if res[1].Values[0] != testExec || res[2].Values[0] != fmt.Sprint(stopped.UnixMilli()) {
		t.Errorf("the cleanup's release values: %+v %+v", res[1], res[2])
	}
	// Undefined (as here) or an error both fail the Wait state in Step
	// Functions (States.QueryEvaluationError): nothing is released.
	if res[3].Error == "" && res[3].Values[0] != nil {
		t.Errorf("an event without stopDate gives a hold until %v, want no value (nothing released)", res[3].Values)
	}
	if got := dig(rel, "Arguments", "ConditionExpression"); got != "#owner = :dead AND Held = :true AND AcquiredAtMs <= :stopped" {
		t.Errorf("the cleanup's condition %v", got)
	}
	pattern := EventPattern("arn:m")
	if mustJSON(t, pattern) != `{"detail":{"stateMachineArn":["arn:m"],"status":["FAILED","TIMED_OUT","ABORTED"]},"detail-type":["Step Functions Execution Status Change"],"source":["aws.states"]}` {
		t.Errorf("event pattern %s", mustJSON(t, pattern))
	}
}

// Issue 25, item 2: once the task has been retried, every error keeps the
// lock (an earlier attempt that failed with an error after which its work
// may run could still be running); the Catch reads the retry count.
func TestRetriedErrorKeepsLock(t *testing.T) {
	m, _ := mustConfig(t, lambdaConfig)
	cond := condition(t, m, StateAfterTaskError, 1)
	catch := stateOf(t, m, StateTask)["Catch"].([]any)[0].(map[string]any)["Assign"].(map[string]any)
	retried, _ := catch["lh_retried"].(string)
	withRetries := func(n int) map[string]any {
		c := ctxAt(time.Minute, -1)
		if n >= 0 {
			c["State"].(map[string]any)["RetryCount"] = n
		}
		return map[string]any{"context": c}
	}
	res := evalExprs(t, []exprCase{
		{Expr: retried, States: withRetries(0)},
		{Expr: retried, States: withRetries(2)},
		{Expr: retried, States: withRetries(-1)}, // no RetryCount: taken as retried
		{Expr: cond, Vars: map[string]any{"lh_error": map[string]any{"Error": "Boom"}, "lh_retried": false}},
		{Expr: cond, Vars: map[string]any{"lh_error": map[string]any{"Error": "Boom"}, "lh_retried": true}},
		{Expr: cond, Vars: map[string]any{"lh_error": map[string]any{"Error": "Lambda.ServiceException"}, "lh_retried": false}},
	})
	for i, want := range []bool{false, true, true, false, true, true} {
		if res[i].Error != "" || len(res[i].Values) != 1 || res[i].Values[0] != want {
			t.Errorf("case %d: %+v, want %v", i, res[i], want)
		}
	}
}

// Issue 25, item 4: a --task keeps the lock after every error (a service
// error of a .sync or callback integration does not prove the work
// ended) but the errors the user declares final, and after those too once
// the task has been retried; timeouts cannot be declared final.
func TestTaskErrorsKeepLockUnlessFinal(t *testing.T) {
	m, _ := mustConfig(t, taskConfig)
	c := taskConfig
	c.FinalErrors = []string{"States.TaskFailed", "Batch.Final"}
	mf, _ := mustConfig(t, c)
	cond, condFinal := condition(t, m, StateAfterTaskError, 1), condition(t, mf, StateAfterTaskError, 1)
	type tc struct {
		cond, err string
		retried   bool
		want      bool
	}
	cases := []tc{
		{cond, "ECS.AmazonECSException", false, true},
		{cond, "States.TaskFailed", false, true},
		{cond, "States.Timeout", false, true},
		{condFinal, "ECS.AmazonECSException", false, true},
		{condFinal, "States.Timeout", false, true},
		{condFinal, "States.TaskFailed", false, false},
		{condFinal, "Batch.Final", false, false},
		{condFinal, "Batch.Final", true, true},
	}
	var ecs []exprCase
	for _, k := range cases {
		ecs = append(ecs, exprCase{Expr: k.cond, Vars: map[string]any{"lh_error": map[string]any{"Error": k.err}, "lh_retried": k.retried}})
	}
	res := evalExprs(t, ecs)
	for i, k := range cases {
		if res[i].Error != "" || len(res[i].Values) != 1 || res[i].Values[0] != k.want {
			t.Errorf("after %s (final declared: %v, retried %v): hold = %+v, want %v", k.err, k.cond == condFinal, k.retried, res[i], k.want)
		}
	}
	for _, bad := range [][]string{{"States.Timeout"}, {"States.HeartbeatTimeout"}, {"States.ALL"}, {""}, {" X"}, {"A", "A"}} {
		c := taskConfig
		c.FinalErrors = bad
		if _, err := Generate(c); err == nil || !strings.Contains(err.Error(), "final errors") {
			t.Errorf("final errors %q: %v, want an error naming final errors", bad, err)
		}
	}
	lc := lambdaConfig
	lc.FinalErrors = []string{"Boom"}
	if _, err := Generate(lc); err == nil || !strings.Contains(err.Error(), "final errors") {
		t.Errorf("final errors with a Lambda function: %v, want an error", err)
	}
}

// Issue 25, item 2: States.TaskFailed in a Retry matches
// States.HeartbeatTimeout, so with HeartbeatSeconds a retry would run the
// task again beside the attempt that missed its heartbeat: refused.
func TestHeartbeatWithTaskFailedRetryRefused(t *testing.T) {
	c := taskConfig
	c.Task = json.RawMessage(`{"Type": "Task", "Resource": "arn:aws:states:::ecs:runTask.waitForTaskToken", "HeartbeatSeconds": 60,
		"Retry": [{"ErrorEquals": ["Custom.Error"]}, {"ErrorEquals": ["States.TaskFailed"], "MaxAttempts": 2}], "End": true}`)
	if _, err := Generate(c); err == nil || !strings.Contains(err.Error(), "Retry[1] retries States.TaskFailed") {
		t.Errorf("HeartbeatSeconds with a States.TaskFailed retrier: %v, want it refused", err)
	}
	c.Task = json.RawMessage(`{"Type": "Task", "Resource": "arn:aws:states:::ecs:runTask.waitForTaskToken", "HeartbeatSeconds": 60,
		"Retry": [{"ErrorEquals": ["Custom.Error"]}], "End": true}`)
	if _, err := Generate(c); err != nil {
		t.Errorf("HeartbeatSeconds with a named retrier: %v", err)
	}
}

// Issue 25, item 3: Step Functions drops a Wait Timestamp's fraction of a
// second, so every hold is rounded up to a whole second (not down).
func TestHoldTimestampsWholeSeconds(t *testing.T) {
	m, p := mustConfig(t, lambdaConfig)
	cl, err := Cleanup(lambdaConfig)
	if err != nil {
		t.Fatal(err)
	}
	var cm map[string]any
	if err := json.Unmarshal(cl, &cm); err != nil {
		t.Fatal(err)
	}
	entered := testEpoch.Add(time.Minute + 1234*time.Millisecond)
	odd := ctxAt(time.Minute+5*time.Second+1*time.Millisecond, -1)
	res := evalExprs(t, []exprCase{
		{Expr: stateOf(t, m, StateHoldAfterTimeout)["Timestamp"].(string), Vars: map[string]any{"lh_task_entered": entered.UnixMilli()}, States: map[string]any{"context": odd}},
		{Expr: stateOf(t, m, StateRedriveHold)["Timestamp"].(string), Vars: map[string]any{"lh_expires": entered.Add(time.Second).UnixMilli()}, States: map[string]any{"context": odd}},
		{Expr: stateOf(t, cm, CleanupStateHold)["Timestamp"].(string), States: map[string]any{"input": map[string]any{"detail": map[string]any{"stopDate": entered.UnixMilli()}}}},
	})
	exact := []time.Time{
		minTime(entered.Add(p.Bound), testEpoch.Add(time.Minute+5*time.Second+time.Millisecond+p.Hold)),
		entered.Add(time.Second),
		entered.Add(p.Hold),
	}
	for i, e := range exact {
		want := e.Add(time.Second - time.Nanosecond).Truncate(time.Second).Format("2006-01-02T15:04:05.000Z")
		if res[i].Error != "" || len(res[i].Values) != 1 || res[i].Values[0] != want {
			t.Errorf("hold %d waits until %+v, want %s (%s rounded up)", i, res[i], want, e.Format(time.RFC3339Nano))
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Issue 25's review: a Lambda invoke with InvocationType "Event" returns
// at once while the function runs later (Lambda's async queue retries for
// hours): the lock cannot cover it, so it is refused, on the optimised
// integration and on the SDK one.
func TestAsyncLambdaInvokeRefused(t *testing.T) {
	for _, res := range []string{"arn:aws:states:::lambda:invoke", "arn:aws:states:::aws-sdk:lambda:invoke"} {
		c := lambdaConfig
		c.LambdaARN = ""
		c.Task = json.RawMessage(`{"Type": "Task", "Resource": "` + res + `", "Arguments": {"FunctionName": "f", "InvocationType": "Event"}, "End": true}`)
		if strings.Contains(res, "aws-sdk") {
			c.LambdaTimeout, c.TaskGrace = 0, time.Minute
		}
		if _, err := Generate(c); err == nil || !strings.Contains(err.Error(), "InvocationType") {
			t.Errorf("%s with InvocationType Event: %v, want it refused", res, err)
		}
	}
}
