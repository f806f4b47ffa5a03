// Package sfn writes AWS Step Functions state machines (JSONata query
// language, Standard workflows) that run a task while holding a leasehold
// lock kept in a DynamoDB table with the layout of the dynamodb store, so
// that state machines, Go programs and "leasehold run --store
// dynamodb://..." exclude each other on the same lock. It also writes a
// cleanup machine, the EventBridge rule that starts it, and templates
// (CloudFormation, Terraform) that deploy all of it in one step.
//
// # The machine
//
//	Init ─► CheckInput ─► Acquire ─ok─► CheckLease ─ok─► Task ─ok─► Release ─► (task's output)
//	                        │ held         │ redriven or          │ error        │ lease lost
//	                        ▼              │ too little time left ▼              ▼
//	                     CanRetry ◄── LeaseTooShort         AfterTaskError     LeaseLost (Fail)
//	                      │ yes  │ no                        │  │ timeout: HoldAfterTimeout
//	               WaitForLock  LockNotAcquired (Fail)       │  │ redriven: RedriveHold ─► Redriven ─► Acquire
//	                      └──► Acquire                       ▼  ▼
//	                                                 ReleaseAfterFailure ─► TaskFailed (Fail: the task's error)
//	                                                         │ lease lost
//	                                                         ▼
//	                                                 LeaseLostAfterFailure (Fail, with the task's error)
//
// Acquire is one conditional UpdateItem: it succeeds when the lock item is
// absent, released, expired (ExpiresAtMs older than now minus the clock
// skew), or already held by this execution, and it adds 1 to the lock's
// fencing token. "now" is the Acquire state's EnteredTime, constant across
// its own retries, so the lease (ExpiresAtMs = now + TTL) is counted from
// the first attempt of the write.
//
// The guarantees, and the conditions under which they hold:
//
//   - The task runs only after CheckLease has seen, on Step Functions'
//     clock, that the rest of the lease covers the task's bound (every
//     attempt's TimeoutSeconds, the backoff between them, and what the work
//     may run on after Step Functions stops waiting for it: the Lambda's
//     own timeout plus 10 s, or TaskGrace) plus Margin. Another client
//     takes the lock over only after ExpiresAtMs plus its own clock skew.
//   - A redrive never reaches the task with the old grant: the task's
//     TimeoutSeconds expression fails (States.QueryEvaluationError, caught)
//     when $states.context.Execution.RedriveCount differs from the value
//     saved at Acquire; the machine then waits until the earlier attempt's
//     work cannot run (the earlier lease's expiry, or Hold from now,
//     whichever is sooner) and acquires again, with a new token.
//   - After a task timeout (or a Lambda service error that leaves open
//     whether the function runs, any error of a Task that does not invoke
//     Lambda but those declared final, or any error once the task has been
//     retried), the machine keeps the lock until the work cannot run (the
//     task's bound from its entry, or Hold from the error, whichever is
//     sooner, rounded up to a whole second) before releasing it.
//   - Release, after success and after every catchable error, is
//     conditional on owner and token; when it finds another grant the
//     machine fails with Leasehold.LeaseLost (keeping the task's error in
//     the cause).
//   - An execution that ends without running its Catch (stopped, timed out
//     as a whole, or failed by an uncatchable States.Runtime error) leaves
//     the lock to the cleanup machine (Hold after it stopped) or to its
//     expiry.
//
// Not covered: Express workflows (at-least-once), a Lambda whose timeout
// is raised above LambdaTimeout after the machine is written, and work
// that a Task starts but does not wait for (a request-response
// integration that starts a job: use .sync).
//
// # The ASL subset the generator emits
//
// The test executor (testrig/aslexec) runs exactly this subset:
//
//   - Top level: Comment, QueryLanguage "JSONata", StartAt, States.
//   - State types and their fields: Pass (Comment, Assign, Output, Next or
//     End); Choice (Choices with Condition and Next; Default); Wait
//     (Comment, Seconds or Timestamp, each a JSONata expression; Assign;
//     Next); Task (Resource, Arguments, Output, Assign, TimeoutSeconds as a
//     JSONata expression — a number under the mutation sfn-old-redrive —,
//     Retry, Catch with ErrorEquals, Assign and Next; Next or End);
//     Succeed; Fail (Error and Cause, literal or JSONata). A --task state
//     brings its own fields besides (HeartbeatSeconds, Credentials,
//     Comment, its Retry). Retry fields: ErrorEquals, IntervalSeconds,
//     MaxAttempts, BackoffRate, JitterStrategy "FULL" (and, in a --task's
//     Retry, MaxDelaySeconds).
//   - JSONata bindings: $states.input, $states.result, $states.errorOutput,
//     $states.context.Execution.Id, $states.context.Execution.RedriveCount
//     (absent is read as 0), $states.context.State.EnteredTime (also in a
//     Catch's Assign, where it is the Task state's entry); variables
//     lh_input, lh_attempt, lh_deadline, lh_token, lh_expires,
//     lh_redrives, lh_error, lh_task_entered and leasehold. Operators: and,
//     =, !=, <, <=, +, -, *, /, &, in, ?:, object and array constructors.
//     Functions: $toMillis, $fromMillis, $string, $number, $exists, $not,
//     $type, $merge, $random (no seed), $ceil, $min, $max, $power, $error.
//     An expression that is undefined or throws fails its state with
//     States.QueryEvaluationError.
//   - Service integrations: arn:aws:states:::dynamodb:updateItem (both
//     machines; ReturnValues UPDATED_NEW on Acquire) and
//     arn:aws:states:::lambda:invoke (with --lambda; a --task brings its
//     own resource).
//   - Errors caught: DynamoDB.ConditionalCheckFailedException, States.ALL;
//     retried: DynamoDB throttling and service errors. Errors raised:
//     Leasehold.LockNotAcquired, Leasehold.LeaseLost,
//     Leasehold.InvalidInput and the task's own.
//
// The cleanup machine (Cleanup) is Wait (Timestamp: the event's
// detail.stopDate + Hold) → one conditional UpdateItem (Owner is the dead
// execution's ARN, Held, AcquiredAtMs not after stopDate) → Succeed (or a
// Pass saying nothing was released); its input is the EventBridge event
// that EventPattern matches.
package sfn

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/dynamodb"
	"github.com/leasehold/leasehold/storekit"
)

// Config describes the machine to write. The zero value of every optional
// field means its default.
type Config struct {
	Table string // DynamoDB table (the dynamodb store's layout)
	Lock  string // lock name: the LockKey of the item (storekit.ValidateName's rules)
	// Exactly one of LambdaARN and Task: the work to run under the lock.
	LambdaARN string
	// LambdaTimeout is the Lambda function's own timeout (1s-15m, whole
	// seconds). Required with LambdaARN and with a Task that invokes a
	// Lambda function: Step Functions' timeout does not stop a running
	// function, so the machine bounds the function by its own timeout.
	LambdaTimeout time.Duration
	// Task is a Task state (JSON object, JSONata form) without Catch; Next
	// and End are set here. Its Retry is kept, but may not retry
	// States.ALL, States.Timeout or States.HeartbeatTimeout.
	Task json.RawMessage
	// TaskGrace is how long the work of a Task that does not invoke a
	// Lambda function may go on after Step Functions stops waiting for it
	// (its state timed out, or the execution was stopped). Required (at
	// least 1s) with such a Task.
	TaskGrace time.Duration
	// FinalErrors are the error names of a Task that does not invoke a
	// Lambda function after which its work has certainly ended, so that
	// the lock is released at once (an ECS .sync task's States.TaskFailed,
	// say). After any other error of such a Task — a service error of a
	// .sync or callback integration does not prove that the work stopped —
	// the machine keeps the lock as after a timeout. Not States.ALL,
	// States.Timeout or States.HeartbeatTimeout; not with a Lambda
	// function, whose errors are sorted by the machine.
	FinalErrors []string
	// TTL is the lease time. Default 1h; between 10s and 24h.
	TTL time.Duration
	// Margin is the lease time left over after the task's bound, for the
	// release and Step Functions' own latency. Default min(1m, max(2s,
	// TTL/10)).
	Margin time.Duration
	// MaxClockSkew is subtracted from now when judging expiry, as the Go
	// store does. Default 1s.
	MaxClockSkew time.Duration
	// Wait is how long an execution waits for the lock, counted from its
	// first acquire attempt. Default TTL plus the task's bound: an
	// execution that arrives while another runs its task outlasts it. A
	// shorter Wait is allowed (the execution then may give up first).
	Wait time.Duration
	// MaxDelay caps one randomized wait between attempts. Default 30s, or
	// more when Wait needs it to stay within MaxAttempts.
	MaxDelay time.Duration
	// MaxAttempts bounds the acquire attempts (and so the execution's
	// history). Default what Wait needs; at most 2000.
	MaxAttempts int
	// Name names the state machine in templates ([A-Za-z0-9_-], up to 70
	// characters; the cleanup machine adds "-cleanup"). Default "leasehold-"
	// and the lock name's letters and digits.
	Name string
	// ExistingTable makes templates use the table instead of creating it.
	ExistingTable bool
	Comment       string
}

// Limits of the generator.
const (
	maxAttemptsLimit = 2000 // × ~10 history events per attempt stays below 25,000
	minTTL           = 10 * time.Second
	maxTTL           = leasehold.MaxTTL
	maxLambdaTimeout = 15 * time.Minute
	// LambdaStartAllowance is added to a Lambda function's timeout: the
	// time a function may start after Step Functions invoked it (Lambda's
	// init phase is limited to 10 s).
	LambdaStartAllowance = 10 * time.Second
	maxAcquireAllowance  = 31 * time.Second // Acquire's own retries: 1+2+4+8+16 s
	maxTaskFile          = 256 << 10
)

var (
	lambdaRE = regexp.MustCompile(`^arn:aws[a-zA-Z-]*:lambda:[a-z0-9-]+:\d{12}:function:[a-zA-Z0-9-_]+(:[a-zA-Z0-9-_$]+)?$`)
	nameRE   = regexp.MustCompile(`^[A-Za-z0-9_-]{1,70}$`)
)

// Plan is what Generate derives from a Config: the task's bound and the
// waiting, all in whole seconds where Step Functions takes seconds.
type Plan struct {
	// TaskTimeout is the task state's TimeoutSeconds (per attempt).
	TaskTimeout time.Duration
	// Attempts is how often the task may start: 1 plus its retries.
	Attempts int
	// Backoff is the longest total of the task's retry intervals.
	Backoff time.Duration
	// Overrun is how long the work may outlast its last attempt's state.
	Overrun time.Duration
	// Bound is Attempts × TaskTimeout + Backoff + Overrun: the task's work
	// ends within Bound of entering the Task state.
	Bound time.Duration
	// Hold is how long the lock is kept after Step Functions stopped
	// waiting for the work (timeout, redrive, cleanup of a dead execution):
	// for a Lambda function its timeout plus LambdaStartAllowance, else
	// TaskGrace.
	Hold time.Duration
	// AcquireAllowance is the time Acquire may take (its own retries
	// included) within the lease: min(31s, TTL/10).
	AcquireAllowance time.Duration
	// Wait, MaxDelay and MaxAttempts are the waiting for the lock.
	Wait        time.Duration
	MaxDelay    time.Duration
	MaxAttempts int
	// HoldErrors are the task errors after which the machine keeps the
	// lock for Hold before releasing it (a Lambda function: timeouts and
	// the Lambda service errors after which it may run). Nil for a Task
	// that does not invoke Lambda: it keeps the lock after every error but
	// FinalErrors. After a retry every error keeps it (an earlier
	// attempt's work may still run).
	HoldErrors []string
	// FinalErrors are Config.FinalErrors.
	FinalErrors []string
}

// holdCondition is AfterTaskError's condition (JSONata) for keeping the
// lock after the task's error $lh_error.
func (p Plan) holdCondition() string {
	if p.HoldErrors == nil {
		if len(p.FinalErrors) == 0 {
			return `true`
		}
		return `$lh_retried or $not($lh_error.Error in ` + jsonList(p.FinalErrors) + `)`
	}
	return `$lh_retried or $lh_error.Error in ` + jsonList(p.HoldErrors)
}

func (c *Config) defaults() {
	if c.TTL == 0 {
		c.TTL = time.Hour
	}
	if c.Margin == 0 {
		c.Margin = min(time.Minute, max(2*time.Second, c.TTL/10))
	}
	if c.MaxClockSkew == 0 {
		c.MaxClockSkew = time.Second
	}
}

// Validate reports the first problem with c, as an error naming the field.
// It fills in the defaults.
func (c *Config) Validate() error {
	_, err := c.Plan()
	return err
}

// Plan validates c (filling in its defaults) and returns the task's bound
// and the waiting it implies, or an error naming the field that is wrong
// or the options that do not fit together.
func (c *Config) Plan() (Plan, error) {
	c.defaults()
	if err := dynamodb.ValidateTable(c.Table); err != nil {
		return Plan{}, err
	}
	if err := ValidateLock(c.Lock); err != nil {
		return Plan{}, err
	}
	switch {
	case (c.LambdaARN == "") == (len(c.Task) == 0):
		return Plan{}, fmt.Errorf("give exactly one of a Lambda ARN and a Task state")
	case c.LambdaARN != "" && !lambdaRE.MatchString(c.LambdaARN):
		return Plan{}, fmt.Errorf("lambda ARN %q is not a Lambda function ARN", c.LambdaARN)
	case c.TTL < minTTL || c.TTL > maxTTL:
		return Plan{}, fmt.Errorf("ttl %s: want between %s and %s", c.TTL, minTTL, maxTTL)
	case c.Margin < time.Second || c.Margin >= c.TTL:
		return Plan{}, fmt.Errorf("margin %s: want at least 1s and less than the TTL", c.Margin)
	case c.MaxClockSkew < 0 || c.MaxClockSkew > time.Hour:
		return Plan{}, fmt.Errorf("max clock skew %s: want between 0 and 1h", c.MaxClockSkew)
	case c.LambdaTimeout < 0 || c.LambdaTimeout > maxLambdaTimeout || c.LambdaTimeout%time.Second != 0:
		return Plan{}, fmt.Errorf("lambda timeout %s: want whole seconds between 1s and %s (the function's own timeout)", c.LambdaTimeout, maxLambdaTimeout)
	case c.TaskGrace < 0 || c.TaskGrace > maxTTL:
		return Plan{}, fmt.Errorf("task grace %s: want between 1s and %s", c.TaskGrace, maxTTL)
	case c.Wait < 0 || c.Wait > 10*maxTTL:
		return Plan{}, fmt.Errorf("wait %s: want between 1s and %s", c.Wait, 10*maxTTL)
	case c.MaxDelay != 0 && (c.MaxDelay < time.Second || c.MaxDelay > time.Hour):
		return Plan{}, fmt.Errorf("max delay %s: want between 1s and 1h", c.MaxDelay)
	case c.MaxAttempts < 0 || c.MaxAttempts > maxAttemptsLimit:
		return Plan{}, fmt.Errorf("max attempts %d: want between 1 and %d (the history limit)", c.MaxAttempts, maxAttemptsLimit)
	case c.LambdaARN != "" && len(c.FinalErrors) > 0:
		return Plan{}, fmt.Errorf("final errors: only for a Task state that does not invoke Lambda (the machine sorts a Lambda function's errors itself)")
	case c.Name != "" && !nameRE.MatchString(c.Name):
		return Plan{}, fmt.Errorf("name %q: want 1-70 characters of A-Z a-z 0-9 _ -", c.Name)
	}
	p := Plan{AcquireAllowance: min(maxAcquireAllowance, c.TTL/10)}
	// What the task may use of the lease.
	avail := c.TTL - c.Margin - p.AcquireAllowance
	if c.LambdaARN != "" {
		if c.LambdaTimeout == 0 {
			return Plan{}, fmt.Errorf("lambda timeout: required with a Lambda function (its own timeout; Step Functions' timeout does not stop a running function)")
		}
		if c.TaskGrace != 0 {
			return Plan{}, fmt.Errorf("task grace: only for a Task state that does not invoke Lambda (a Lambda function is bounded by its timeout)")
		}
		// The state's timeout outlasts the function's own: when the state
		// times out, the function has ended.
		p.TaskTimeout = c.LambdaTimeout + LambdaStartAllowance
		p.Attempts, p.Hold = 1, p.TaskTimeout
		p.HoldErrors = append(append([]string{}, timeoutErrors...), lambdaUnsureErrors...)
		p.Bound = p.TaskTimeout
		if p.Bound > avail {
			return Plan{}, fmt.Errorf("ttl %s is too short for the Lambda function: its timeout %s + %s to start + margin %s + %s for the acquire = %s",
				c.TTL, c.LambdaTimeout, LambdaStartAllowance, c.Margin, p.AcquireAllowance, p.Bound+c.Margin+p.AcquireAllowance)
		}
	} else if err := c.planTask(&p, avail); err != nil {
		return Plan{}, err
	}
	if err := c.planWait(&p); err != nil {
		return Plan{}, err
	}
	return p, nil
}

// planWait fills in the wait budget and checks it against MaxDelay and
// MaxAttempts. The n-th wait (from 0) lasts between d/2 and d seconds,
// d = min(MaxDelay, 2^n s), and never past the deadline.
func (c *Config) planWait(p *Plan) error {
	p.Wait = c.Wait
	if p.Wait == 0 {
		p.Wait = c.TTL + p.Bound
	}
	p.Wait = roundUp(p.Wait)
	p.MaxDelay = c.MaxDelay
	if p.MaxDelay == 0 {
		// Enough for Wait in about 1,500 attempts.
		p.MaxDelay = max(30*time.Second, roundUp(2*p.Wait/1500))
		p.MaxDelay = min(p.MaxDelay, time.Hour)
	}
	p.MaxDelay = roundUp(p.MaxDelay)
	if p.MaxDelay > p.Wait && c.MaxDelay != 0 && c.Wait != 0 {
		return fmt.Errorf("max delay %s: longer than the wait %s", p.MaxDelay, p.Wait)
	}
	need := AttemptsFor(p.Wait, p.MaxDelay)
	switch {
	case c.MaxAttempts == 0 && need > maxAttemptsLimit:
		return fmt.Errorf("wait %s needs %d attempts with max delay %s, more than %d (the history limit): raise --max-delay", p.Wait, need, p.MaxDelay, maxAttemptsLimit)
	case c.MaxAttempts == 0:
		p.MaxAttempts = need
	case c.MaxAttempts < need:
		return fmt.Errorf("max attempts %d cannot cover the wait %s with max delay %s: it needs %d (raise --max-attempts or --max-delay, or shorten --wait)", c.MaxAttempts, p.Wait, p.MaxDelay, need)
	default:
		p.MaxAttempts = c.MaxAttempts
	}
	return nil
}

// AttemptsFor is the number of acquire attempts whose waits, each at
// least half of min(maxDelay, 2^n s), add up to wait.
func AttemptsFor(wait, maxDelay time.Duration) int {
	var sum time.Duration
	n := 1
	for ; sum < wait && n <= 10*maxAttemptsLimit; n++ {
		d := min(maxDelay, time.Duration(1)<<min(n-1, 20)*time.Second)
		sum += d / 2
	}
	return n
}

func roundUp(d time.Duration) time.Duration {
	return (d + time.Second - 1) / time.Second * time.Second
}

// ValidateLock checks a lock name with the Go store's rules
// (storekit.ValidateName: 1-256 bytes of UTF-8 without control
// characters), and refuses the DynamoDB store's record key space.
func ValidateLock(name string) error {
	if err := storekit.ValidateName(name); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	if strings.HasPrefix(name, dynamodb.RecordKeyPrefix) {
		return fmt.Errorf("lock %q: starts with the DynamoDB store's record key prefix", name)
	}
	return nil
}

// seconds is d in whole seconds, rounded up, for Step Functions fields.
func seconds(d time.Duration) int64 { return int64(math.Ceil(d.Seconds())) }
