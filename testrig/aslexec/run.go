package aslexec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/leasehold/leasehold/clock"
)

// errInterrupted ends a run that was aborted or timed out.
var errInterrupted = errors.New("interrupted")

const timeLayout = "2006-01-02T15:04:05.000Z"

// run executes states from from until the execution ends or intr closes.
func (x *Execution) run(from string, input any, intr <-chan struct{}) {
	cur := from
	for {
		st := x.m.States[cur]
		x.mu.Lock()
		x.at, x.atInput, x.atVars = cur, input, copyVars(x.vars)
		x.mu.Unlock()
		x.event(Event{Type: EvStateEntered, State: cur})
		next, out, f := x.step(st, input, intr)
		switch {
		case errors.Is(f, errInterrupted):
			x.finish(Result{})
			return
		case f != nil:
			var fl *Failure
			if !errors.As(f, &fl) {
				fl = &Failure{Name: "States.Runtime", Cause: f.Error()}
			}
			x.finish(Result{Status: Failed, Error: fl.Name, Cause: fl.Cause, State: cur})
			return
		}
		x.event(Event{Type: EvStateExited, State: cur})
		if next == "" {
			x.finish(Result{Status: Succeeded, Output: out})
			return
		}
		select {
		case <-intr:
			x.finish(Result{})
			return
		default:
		}
		cur, input = next, out
	}
}

// contextObject is $states.context for a state entered at entered.
func (x *Execution) contextObject(st *state, entered time.Time, retries int) map[string]any {
	x.mu.Lock()
	exec := map[string]any{"Id": x.ID, "Name": x.Name, "StartTime": x.start.UTC().Format(timeLayout),
		"Input": x.input, "RoleArn": "arn:aws:iam::123456789012:role/aslexec", "RedriveCount": x.redrive}
	if x.redrive > 0 {
		exec["RedriveTime"] = x.redTime.UTC().Format(timeLayout)
	}
	x.mu.Unlock()
	return map[string]any{
		"Execution":    exec,
		"State":        map[string]any{"Name": st.Name, "EnteredTime": entered.UTC().Format(timeLayout), "RetryCount": retries},
		"StateMachine": map[string]any{"Id": x.MachineARN, "Name": lastPart(x.MachineARN)},
	}
}

func lastPart(arn string) string {
	for i := len(arn) - 1; i >= 0; i-- {
		if arn[i] == ':' {
			return arn[i+1:]
		}
	}
	return arn
}

// bindings are the JSONata bindings: the variables and $states.
func (x *Execution) bindings(states map[string]any) map[string]any {
	b := make(map[string]any, len(x.vars)+1)
	for k, v := range x.vars {
		b[k] = v
	}
	b["states"] = states
	return b
}

// eval evaluates a field; an evaluation error is States.QueryEvaluationError.
func (x *Execution) eval(loc string, tmpl any, states map[string]any, out any) error {
	err := x.e.ev.eval(context.Background(), loc, tmpl, x.bindings(states), out)
	var ee *EvalError
	if errors.As(err, &ee) {
		return &Failure{Name: "States.QueryEvaluationError", Cause: ee.Error()}
	}
	return err
}

// finishState evaluates Assign and Output (in parallel: both see the
// variables as they were before the state, as Step Functions does),
// applies the assignments and returns the output. def is the output when
// there is no Output field.
func (x *Execution) finishState(name string, assign map[string]any, output any, hasOutput bool, def any, states map[string]any) (any, error) {
	tmpl := map[string]any{}
	if assign != nil {
		tmpl["Assign"] = assign
	}
	if hasOutput {
		tmpl["Output"] = output
	}
	if len(tmpl) == 0 {
		return def, nil
	}
	var got struct {
		Assign map[string]any
		Output any
	}
	if err := x.eval(name, tmpl, states, &got); err != nil {
		return nil, err
	}
	for k, v := range got.Assign {
		x.vars[k] = v
	}
	if hasOutput {
		return got.Output, nil
	}
	return def, nil
}

// step runs one state and returns the next state ("" at the end), its
// output, or a failure (*Failure, or errInterrupted).
func (x *Execution) step(st *state, input any, intr <-chan struct{}) (string, any, error) {
	entered := x.e.Now()
	states := map[string]any{"input": input, "context": x.contextObject(st, entered, 0)}
	switch st.Type {
	case "Pass":
		out, err := x.finishState(st.Name, st.Assign, st.Output, st.HasOutput, input, states)
		return st.Next, out, err
	case "Succeed":
		out, err := x.finishState(st.Name, nil, st.Output, st.HasOutput, input, states)
		return "", out, err
	case "Fail":
		var f struct{ Error, Cause string }
		if err := x.eval(st.Name, map[string]any{"Error": st.Error, "Cause": st.Cause}, states, &f); err != nil {
			return "", nil, err
		}
		return "", nil, &Failure{Name: f.Error, Cause: f.Cause}
	case "Choice":
		for i, c := range st.Choices {
			var ok any
			if err := x.eval(fmt.Sprintf("Choices[%d].Condition", i), c.Condition, states, &ok); err != nil {
				return "", nil, err
			}
			b, isBool := ok.(bool)
			if !isBool {
				return "", nil, &Failure{Name: "States.QueryEvaluationError", Cause: fmt.Sprintf("Choices[%d].Condition is %v, not a boolean", i, ok)}
			}
			if b {
				out, err := x.finishState(st.Name, c.Assign, c.Output, c.HasOutput, input, states)
				return c.Next, out, err
			}
		}
		if st.Default == "" {
			return "", nil, &Failure{Name: "States.NoChoiceMatched", Cause: "no choice rule matched and there is no Default"}
		}
		out, err := x.finishState(st.Name, st.Assign, st.Output, st.HasOutput, input, states)
		return st.Default, out, err
	case "Wait":
		d, err := x.waitFor(st, states)
		if err != nil {
			return "", nil, err
		}
		if !x.sleep(d, intr) {
			return "", nil, errInterrupted
		}
		out, err := x.finishState(st.Name, st.Assign, st.Output, st.HasOutput, input, states)
		return st.Next, out, err
	case "Task":
		return x.task(st, input, entered, intr)
	}
	return "", nil, fmt.Errorf("aslexec: state type %s", st.Type)
}

func (x *Execution) waitFor(st *state, states map[string]any) (time.Duration, error) {
	if st.Seconds != nil {
		var secs float64
		if err := x.eval("Seconds", st.Seconds, states, &secs); err != nil {
			return 0, err
		}
		if secs < 0 || secs != math.Trunc(secs) {
			return 0, &Failure{Name: "States.Runtime", Cause: fmt.Sprintf("Seconds %v: want a non-negative integer", secs)}
		}
		return time.Duration(secs) * time.Second, nil
	}
	var ts string
	if err := x.eval("Timestamp", st.Timestamp, states, &ts); err != nil {
		return 0, err
	}
	t, err := time.Parse(time.RFC3339, ts)
	if err != nil {
		return 0, &Failure{Name: "States.Runtime", Cause: fmt.Sprintf("Timestamp %q: %v", ts, err)}
	}
	// Step Functions drops a Timestamp's fraction of a second.
	return max(0, t.Truncate(time.Second).Sub(x.e.Now())), nil
}

// sleep waits d on the executor's clock; false if interrupted first.
func (x *Execution) sleep(d time.Duration, intr <-chan struct{}) bool {
	if d <= 0 {
		select {
		case <-intr:
			return false
		default:
			return true
		}
	}
	t := x.e.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-intr:
		return false
	}
}

// task runs a Task state: attempts with their timeouts, Retry, Catch.
func (x *Execution) task(st *state, input any, entered time.Time, intr <-chan struct{}) (string, any, error) {
	counts := make([]int, len(st.Retry))
	for retries := 0; ; retries++ {
		states := map[string]any{"input": input, "context": x.contextObject(st, entered, retries)}
		res, err := x.attempt(st, states, retries, intr)
		if errors.Is(err, errInterrupted) {
			return "", nil, err
		}
		if err == nil {
			states["result"] = res
			out, err2 := x.finishState(st.Name, st.Assign, st.Output, st.HasOutput, res, states)
			if err2 == nil {
				return st.Next, out, nil
			}
			err = err2
		}
		var f *Failure
		if !errors.As(err, &f) {
			f = &Failure{Name: "States.Runtime", Cause: err.Error()}
		}
		if i, ok := x.retrier(st, f.Name); ok && counts[i] < st.Retry[i].MaxAttempts {
			d := retryDelay(st.Retry[i], counts[i])
			counts[i]++
			x.event(Event{Type: EvRetry, State: st.Name, RetryCount: retries + 1, Error: f.Name, Cause: f.Cause, Delay: d})
			if !x.sleep(d, intr) {
				return "", nil, errInterrupted
			}
			continue
		}
		for _, c := range st.Catch {
			if !matches(c.ErrorEquals, f.Name) {
				continue
			}
			x.event(Event{Type: EvCaught, State: st.Name, Error: f.Name, Cause: f.Cause})
			eo := map[string]any{"Error": f.Name}
			if f.Cause != "" { // an error without a cause has no Cause field
				eo["Cause"] = f.Cause
			}
			states["errorOutput"] = eo
			delete(states, "result")
			out, err := x.finishState(st.Name, c.Assign, c.Output, c.HasOutput, eo, states)
			if err != nil {
				return "", nil, err
			}
			return c.Next, out, nil
		}
		return "", nil, f
	}
}

// retrier returns the first retrier whose ErrorEquals matches name: only
// that one is used, exhausted or not.
func (x *Execution) retrier(st *state, name string) (int, bool) {
	for i, r := range st.Retry {
		if matches(r.ErrorEquals, name) {
			return i, true
		}
	}
	return 0, false
}

// retryDelay is the interval before retry n+1 of a retrier (n retries
// done): IntervalSeconds × BackoffRate^n, at most MaxDelaySeconds, and with
// JitterStrategy FULL a uniformly random time between 0 and that.
func retryDelay(r retrier, n int) time.Duration {
	secs := r.IntervalSeconds * math.Pow(r.BackoffRate, float64(n))
	if r.MaxDelaySeconds > 0 && secs > r.MaxDelaySeconds {
		secs = r.MaxDelaySeconds
	}
	if r.JitterStrategy == "FULL" {
		secs *= rand.Float64()
	}
	return time.Duration(secs * float64(time.Second))
}

// attempt evaluates a Task's Arguments and TimeoutSeconds and runs one
// attempt. A timeout fails the attempt with States.Timeout and leaves the
// task running.
func (x *Execution) attempt(st *state, states map[string]any, retries int, intr <-chan struct{}) (any, error) {
	var args any
	if st.Arguments != nil {
		if err := x.eval("Arguments", st.Arguments, states, &args); err != nil {
			return nil, err
		}
	}
	timeout, err := x.seconds("TimeoutSeconds", st.TimeoutSeconds, states)
	if err != nil {
		return nil, err
	}
	heartbeat, err := x.seconds("HeartbeatSeconds", st.HeartbeatSeconds, states)
	if err != nil {
		return nil, err
	}
	if heartbeat > 0 && timeout > 0 && heartbeat >= timeout {
		return nil, &Failure{Name: "States.Runtime", Cause: fmt.Sprintf("HeartbeatSeconds %v: must be less than TimeoutSeconds %v", heartbeat, timeout)}
	}
	x.event(Event{Type: EvTaskScheduled, State: st.Name, RetryCount: retries})
	type answer struct {
		v   any
		err error
	}
	ch := make(chan answer, 1) // buffered: a task that outlives its attempt does not block
	abandoned := make(chan struct{})
	defer close(abandoned)
	x.mu.Lock()
	call := Call{Execution: x, State: st.Name, RetryCount: retries, RedriveCount: x.redrive, Abandoned: abandoned}
	x.mu.Unlock()
	var beats chan struct{}
	var beatTimer clock.Timer
	var beatC <-chan time.Time
	if heartbeat > 0 {
		beats = make(chan struct{})
		call.heartbeat = beats
		beatTimer = x.e.clk.NewTimer(time.Duration(heartbeat) * time.Second)
		defer beatTimer.Stop()
		beatC = beatTimer.C()
	}
	go func() {
		v, err := x.e.invoke(call, st.Resource, args)
		ch <- answer{v, err}
	}()
	var timer <-chan time.Time
	if timeout > 0 {
		t := x.e.clk.NewTimer(time.Duration(timeout) * time.Second)
		defer t.Stop()
		timer = t.C()
	}
	for {
		select {
		case a := <-ch:
			if a.err != nil {
				var f *Failure
				if !errors.As(a.err, &f) {
					f = &Failure{Name: "States.TaskFailed", Cause: a.err.Error()}
				}
				x.event(Event{Type: EvTaskFailed, State: st.Name, RetryCount: retries, Error: f.Name, Cause: f.Cause})
				return nil, f
			}
			x.event(Event{Type: EvTaskSucceeded, State: st.Name, RetryCount: retries})
			return a.v, nil
		case <-timer:
			x.event(Event{Type: EvTaskTimedOut, State: st.Name, RetryCount: retries, Error: "States.Timeout"})
			return nil, &Failure{Name: "States.Timeout", Cause: fmt.Sprintf("the task did not finish within %v seconds", timeout)}
		case <-beats:
			beatTimer.Stop()
			beatTimer = x.e.clk.NewTimer(time.Duration(heartbeat) * time.Second)
			beatC = beatTimer.C()
		case <-beatC:
			x.event(Event{Type: EvTaskTimedOut, State: st.Name, RetryCount: retries, Error: "States.HeartbeatTimeout"})
			return nil, &Failure{Name: "States.HeartbeatTimeout", Cause: fmt.Sprintf("the task sent no heartbeat within %v seconds", heartbeat)}
		case <-intr:
			return nil, errInterrupted
		}
	}
}

// seconds evaluates a Task's TimeoutSeconds or HeartbeatSeconds (nil: 0,
// none): a positive whole number.
func (x *Execution) seconds(field string, tmpl any, states map[string]any) (float64, error) {
	if tmpl == nil {
		return 0, nil
	}
	var secs float64
	if err := x.eval(field, tmpl, states, &secs); err != nil {
		return 0, err
	}
	if secs < 1 || secs != math.Trunc(secs) {
		return 0, &Failure{Name: "States.Runtime", Cause: fmt.Sprintf("%s %v: want a positive integer", field, secs)}
	}
	return secs, nil
}

// normalize makes v plain JSON (maps, slices, float64, string, bool, nil).
func normalize(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out any
	err = json.Unmarshal(b, &out)
	return out, err
}
