package aslexec

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/leasehold/leasehold/clock"
)

// Options configure an Executor. Every field is optional.
type Options struct {
	// NodeModules is a node_modules directory with the npm package
	// jsonata. Default $LEASEHOLD_TEST_NODE_MODULES.
	NodeModules string
	// DynamoDB is the endpoint (http://host:port, e.g. dynalite) that the
	// arn:aws:states:::dynamodb:* resources call. Without it those tasks
	// fail with DynamoDB.AmazonDynamoDBException.
	DynamoDB string
	// Region of the DynamoDB requests' signature and of the ARNs the
	// executor makes. Default us-east-1.
	Region string
	// Lambdas are the Lambda functions, by function name: the name part
	// of an ARN (arn:aws:lambda:REGION:ACCOUNT:function:NAME[:QUALIFIER])
	// is looked up here.
	Lambdas map[string]Lambda
	// Resources are other Task resources, by their exact ARN.
	Resources map[string]TaskFunc
	// Clock moves Wait states, retry intervals and every timeout. Default
	// the real clock; clock.NewSkewed(k) runs them k+1 times faster.
	Clock clock.Clock
	// Skew is added to every time the machines see ($states.context's
	// times, Wait's Timestamp): this executor's clock error.
	Skew time.Duration
	// OnEvent, when set, is called synchronously for every history event,
	// from the execution's own goroutine. It may call Stop, not Wait.
	OnEvent func(x *Execution, ev Event)
}

// TaskFunc runs a custom Task resource with the state's evaluated
// Arguments and returns its result. Return a *Failure to fail with a
// chosen error name; any other error fails with States.TaskFailed. ctx is
// not cancelled by the state's timeout or by an abort: the task goes on
// as a real one would.
type TaskFunc func(ctx context.Context, call Call, args any) (any, error)

// Lambda is a Go function standing in for a Lambda function.
type Lambda struct {
	// Fn gets the payload and returns the function's result (any JSON
	// value). A *Failure error is reported with its Error and Cause as they
	// are (Lambda.ServiceException, Lambda.TooManyRequestsException, ...);
	// any other error is the function's own, of type "Error", as a Node.js
	// function throwing new Error(message).
	Fn func(ctx context.Context, call Call, payload any) (any, error)
	// Timeout is the function's own timeout, counted from the invocation.
	// When it passes, Lambda kills the function: ctx is cancelled (even if
	// Fn has returned: work Fn left running in the sandbox dies then), and
	// an invocation still waiting fails with Sandbox.Timedout at once. Fn
	// and what it started must stop doing anything another process could
	// observe once ctx is done (a killed sandbox does nothing more); the
	// executor cannot stop a goroutine. 0: no timeout, and ctx ends when Fn
	// returns.
	Timeout time.Duration
}

// Call says which execution, state and attempt invoked a task.
type Call struct {
	Execution  *Execution
	State      string
	RetryCount int // retries of this state so far in this entry (0: first attempt)
	// RedriveCount is the execution's redrive count when the task started.
	RedriveCount int
	// Abandoned is closed when Step Functions stops waiting for this
	// attempt: its result arrived, its state timed out, or the execution
	// was stopped or timed out. A test task that models work which goes
	// on for a bounded time after it was abandoned starts that time here.
	Abandoned <-chan struct{}

	heartbeat chan<- struct{} // the attempt's, if its state has HeartbeatSeconds
}

// Heartbeat is SendTaskHeartbeat for this attempt: with HeartbeatSeconds
// on the state, the attempt's heartbeat timer starts again. It does
// nothing once Step Functions stopped waiting for the attempt (AWS
// answers TaskTimedOut then) or without HeartbeatSeconds.
func (c Call) Heartbeat() {
	if c.heartbeat == nil {
		return
	}
	select {
	case c.heartbeat <- struct{}{}:
	case <-c.Abandoned:
	}
}

// Failure is a Step Functions error: a name that Retry and Catch match,
// and a cause. Tasks return it (see Fail) to fail with a chosen name.
type Failure struct {
	Name  string
	Cause string
}

// Error returns "NAME: CAUSE".
func (f *Failure) Error() string { return f.Name + ": " + f.Cause }

// Fail returns an error that fails a task with the error name and cause
// (for Lambda.Fn and TaskFunc).
func Fail(name, cause string) error { return &Failure{Name: name, Cause: cause} }

// Status is an execution's status, as Step Functions names it.
type Status string

// The statuses of an execution.
const (
	Running   Status = "RUNNING"
	Succeeded Status = "SUCCEEDED"
	Failed    Status = "FAILED"
	TimedOut  Status = "TIMED_OUT"
	Aborted   Status = "ABORTED"
)

// Result is how an execution (or its latest redrive) ended.
type Result struct {
	Status Status
	Output any    // SUCCEEDED
	Error  string // FAILED, TIMED_OUT (States.Timeout), ABORTED (Stop's error)
	Cause  string
	// State is the state the execution failed, timed out or was aborted
	// in: where a redrive starts.
	State        string
	RedriveCount int
}

// Event is one entry of an execution's history.
type Event struct {
	Type       string // see the Ev* constants
	State      string
	At         time.Time // on the executor's clock, skew included
	RetryCount int
	Error      string
	Cause      string
	Delay      time.Duration // EvRetry: the interval before the retry
}

// History event types.
const (
	EvStarted       = "ExecutionStarted"
	EvRedriven      = "ExecutionRedriven"
	EvStateEntered  = "StateEntered"
	EvStateExited   = "StateExited"
	EvTaskScheduled = "TaskScheduled"
	EvTaskSucceeded = "TaskSucceeded"
	EvTaskFailed    = "TaskFailed"
	EvTaskTimedOut  = "TaskTimedOut"
	EvRetry         = "RetryScheduled"
	EvCaught        = "ErrorCaught"
	EvSucceeded     = "ExecutionSucceeded"
	EvFailed        = "ExecutionFailed"
	EvTimedOut      = "ExecutionTimedOut"
	EvAborted       = "ExecutionAborted"
)

// Executor runs state machines. It owns one node process (the JSONata
// evaluator) shared by all its executions; Close stops it. It is safe for
// concurrent use.
type Executor struct {
	opt   Options
	clk   clock.Clock
	ev    *evaluator
	http  *http.Client
	base  context.Context // tasks' context: cancelled by Close only
	stop  context.CancelFunc
	mu    sync.Mutex
	execs map[string]*Execution
	runs  sync.WaitGroup

	closeOnce sync.Once
	closeErr  error
}

// New starts an executor. It fails with an error wrapping ErrNoNode when
// node or the jsonata package is missing.
func New(opt Options) (*Executor, error) {
	if opt.Region == "" {
		opt.Region = "us-east-1"
	}
	clk := opt.Clock
	if clk == nil {
		clk = clock.Real()
	}
	ev, err := startEvaluator(opt.NodeModules)
	if err != nil {
		return nil, err
	}
	base, stop := context.WithCancel(context.Background())
	return &Executor{opt: opt, clk: clk, ev: ev, base: base, stop: stop, execs: map[string]*Execution{},
		http: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}, nil
}

// Close stops every execution still running (ABORTED, with the error
// aslexec.Closed), waits for their goroutines, cancels the context of the
// tasks still going on (Lambda functions and custom resources see it
// done) and stops the node process. Executions cannot be redriven
// afterwards. Closing again does nothing.
func (e *Executor) Close() error {
	e.closeOnce.Do(func() { e.closeErr = e.close() })
	return e.closeErr
}

func (e *Executor) close() error {
	e.mu.Lock()
	for _, x := range e.execs {
		x.interrupt(&Result{Status: Aborted, Error: "aslexec.Closed", Cause: "the executor was closed"})
	}
	e.mu.Unlock()
	e.runs.Wait()
	e.stop()
	e.http.CloseIdleConnections()
	return e.ev.close()
}

// Now is the executor's time: its clock plus its skew.
func (e *Executor) Now() time.Time { return e.clk.Now().Add(e.opt.Skew) }

// Start starts an execution named name (unique per executor) of the
// machine definition def (ASL JSON, JSONata) with input (any JSON value).
// It returns once the execution runs; Wait gives its result.
func (e *Executor) Start(def []byte, machineName, name string, input any) (*Execution, error) {
	m, err := parseMachine(def)
	if err != nil {
		return nil, err
	}
	in, err := normalize(input)
	if err != nil {
		return nil, fmt.Errorf("aslexec: input: %w", err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.execs[name] != nil {
		return nil, fmt.Errorf("aslexec: execution %q already exists", name)
	}
	acct := "123456789012"
	x := &Execution{e: e, m: m, Name: name, input: in,
		MachineARN: fmt.Sprintf("arn:aws:states:%s:%s:stateMachine:%s", e.opt.Region, acct, machineName),
		ID:         fmt.Sprintf("arn:aws:states:%s:%s:execution:%s:%s", e.opt.Region, acct, machineName, name),
		start:      e.Now(), vars: map[string]any{}}
	e.execs[name] = x
	x.begin(m.StartAt, in, nil, EvStarted)
	return x, nil
}

// Execution is one execution of a machine.
type Execution struct {
	e          *Executor
	m          *machine
	Name       string
	ID         string // the execution ARN ($states.context.Execution.Id)
	MachineARN string
	input      any
	start      time.Time

	mu      sync.Mutex
	status  Status
	result  Result
	redrive int
	redTime time.Time
	history []Event
	intr    chan struct{} // closed to interrupt the current run
	intrRes *Result       // why: aborted or timed out
	done    chan struct{} // closed when the current run has ended
	// where the current run is, for a redrive: the state, its input and
	// the variables as they were when it was entered.
	vars     map[string]any
	at       string
	atInput  any
	atVars   map[string]any
	curStart time.Time
}

// begin starts a run at state from; mu must not be held, or be held by
// Start only (no run is going yet).
func (x *Execution) begin(from string, input any, vars map[string]any, ev string) {
	x.status = Running
	x.result = Result{}
	x.intr = make(chan struct{})
	x.intrRes = nil
	x.done = make(chan struct{})
	if vars != nil {
		x.vars = vars
	}
	x.curStart = x.e.Now()
	intr, done := x.intr, x.done
	x.e.runs.Add(1)
	go func() {
		defer x.e.runs.Done()
		x.event(Event{Type: ev})
		if secs := x.m.TimeoutSeconds; secs > 0 {
			t := x.e.clk.NewTimer(time.Duration(secs * float64(time.Second)))
			go func() {
				select {
				case <-t.C():
					x.interrupt(&Result{Status: TimedOut, Error: "States.Timeout", Cause: "the execution's TimeoutSeconds passed"})
				case <-done:
					t.Stop()
				}
			}()
		}
		x.run(from, input, intr)
		close(done)
	}()
}

// Stop aborts a running execution (StopExecution): it ends ABORTED with
// the given error and cause at once. A task in progress is not stopped: a
// Lambda function or a DynamoDB request goes on and its result is dropped.
func (x *Execution) Stop(errName, cause string) error {
	if !x.interrupt(&Result{Status: Aborted, Error: errName, Cause: cause}) {
		return fmt.Errorf("aslexec: execution %s is not running", x.Name)
	}
	return nil
}

func (x *Execution) interrupt(r *Result) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.status != Running || x.intrRes != nil {
		return false
	}
	x.intrRes = r
	close(x.intr)
	return true
}

// Wait waits until the execution (or its latest redrive) has ended, or ctx
// ends, and returns its result.
func (x *Execution) Wait(ctx context.Context) (Result, error) {
	x.mu.Lock()
	done := x.done
	x.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.result, nil
}

// ErrNotRedrivable is returned by Redrive for an execution that is running
// or succeeded.
var ErrNotRedrivable = errors.New("aslexec: only a FAILED, TIMED_OUT or ABORTED execution can be redriven")

// Redrive restarts an execution that ended FAILED, TIMED_OUT or ABORTED
// (RedriveExecution), as Step Functions documents: same execution ARN and
// input, RedriveCount one higher, from the state it failed, timed out or
// was aborted in, which runs again with the input it had then, its retry
// counts at 0 and a new EnteredTime; the variables are those it was
// entered with (its own Assign never happened); the execution's
// TimeoutSeconds counts again from the redrive.
func (x *Execution) Redrive() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	switch x.status {
	case Failed, TimedOut, Aborted:
	default:
		return ErrNotRedrivable
	}
	x.redrive++
	x.redTime = x.e.Now()
	x.begin(x.at, x.atInput, copyVars(x.atVars), EvRedriven)
	return nil
}

// Status returns the execution's status now.
func (x *Execution) Status() Status {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.status
}

// History returns the execution's events so far.
func (x *Execution) History() []Event {
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]Event(nil), x.history...)
}

func (x *Execution) event(ev Event) {
	ev.At = x.e.Now()
	x.mu.Lock()
	x.history = append(x.history, ev)
	x.mu.Unlock()
	if f := x.e.opt.OnEvent; f != nil {
		f(x, ev)
	}
}

// finish records how the run ended.
func (x *Execution) finish(r Result) {
	x.mu.Lock()
	if x.intrRes != nil { // aborted or timed out: that is the end, whatever the run did after
		r = *x.intrRes
		r.State = x.at
	}
	r.RedriveCount = x.redrive
	x.status, x.result = r.Status, r
	x.mu.Unlock()
	ev := map[Status]string{Succeeded: EvSucceeded, Failed: EvFailed, TimedOut: EvTimedOut, Aborted: EvAborted}[r.Status]
	x.event(Event{Type: ev, State: r.State, Error: r.Error, Cause: r.Cause})
}

func copyVars(v map[string]any) map[string]any {
	out := make(map[string]any, len(v))
	for k, x := range v {
		out[k] = x
	}
	return out
}
