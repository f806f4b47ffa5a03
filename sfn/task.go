package sfn

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Errors after which the work may still run although Step Functions
// stopped waiting for it.
//
// lambdaUnsureErrors are the Lambda service errors that AWS's Step
// Functions guide ("Handle Lambda service exceptions",
// docs.aws.amazon.com/step-functions/latest/dg/bp-lambda-serviceexception.html)
// names as transient 500s of an invocation, all four of them: after each,
// the function may have been invoked and may still run.
// (Lambda.TooManyRequestsException is a throttle: the function was not
// invoked. Lambda.Unknown is an unhandled error of the function, a timeout
// or out of memory among them: it has ended.)
var (
	timeoutErrors      = []string{"States.Timeout", "States.HeartbeatTimeout"}
	lambdaUnsureErrors = []string{"Lambda.ClientExecutionTimeoutException", "Lambda.ServiceException", "Lambda.AWSLambdaException", "Lambda.SdkClientException"}
)

// Fields of JSONPath states: a task that uses them is not in JSONata form.
var jsonPathFields = []string{"Parameters", "InputPath", "OutputPath", "ResultPath", "ResultSelector", "TimeoutSecondsPath", "HeartbeatSecondsPath"}

// invokesLambda: the Task resources that run a Lambda function and wait
// for it (a callback pattern's function only starts the work).
var invokesLambda = regexp.MustCompile(`^(arn:aws[a-zA-Z-]*:states:::lambda:invoke|arn:aws[a-zA-Z-]*:lambda:[a-z0-9-]+:\d{12}:function:.+)$`)

// parseTask decodes and checks the Task state of c.Task.
func (c *Config) parseTask() (map[string]any, error) {
	if len(c.Task) > maxTaskFile {
		return nil, fmt.Errorf("task state: %d bytes, more than %d", len(c.Task), maxTaskFile)
	}
	if !utf8.Valid(c.Task) {
		return nil, fmt.Errorf("task state: not valid UTF-8")
	}
	var st map[string]any
	dec := json.NewDecoder(bytes.NewReader(c.Task))
	dec.UseNumber()
	if err := dec.Decode(&st); err != nil {
		return nil, fmt.Errorf("task state: %v", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("task state: more than one JSON value")
	}
	if st == nil {
		return nil, fmt.Errorf("task state: want a JSON object")
	}
	if st["Type"] != "Task" {
		return nil, fmt.Errorf("task state: \"Type\" must be \"Task\", got %v", st["Type"])
	}
	if r, ok := st["Resource"].(string); !ok || r == "" {
		return nil, fmt.Errorf("task state: missing \"Resource\"")
	}
	if args, ok := st["Arguments"].(map[string]any); ok && strings.Contains(st["Resource"].(string), "lambda:invoke") {
		if it, _ := args["InvocationType"].(string); it == "Event" {
			return nil, fmt.Errorf("task state: InvocationType \"Event\" invokes the function asynchronously: the task returns at once while the function runs later (Lambda keeps and retries async events for hours), so the lock cannot cover it; invoke it synchronously (RequestResponse, the default)")
		}
	}
	if _, ok := st["Catch"]; ok {
		return nil, fmt.Errorf("task state: remove \"Catch\": the machine catches every error to release the lock, then fails with the task's error")
	}
	if ql, ok := st["QueryLanguage"]; ok && ql != "JSONata" {
		return nil, fmt.Errorf("task state: QueryLanguage %v: the machine uses JSONata; write the state in JSONata", ql)
	}
	for _, f := range jsonPathFields {
		if _, ok := st[f]; ok {
			return nil, fmt.Errorf("task state: %q is a JSONPath field; write the state in JSONata (Arguments, Output)", f)
		}
	}
	if k := jsonPathKey(st); k != "" {
		return nil, fmt.Errorf("task state: key %q ends in \".$\" (JSONPath); write the state in JSONata", k)
	}
	if a, ok := st["Assign"].(map[string]any); ok {
		for k := range a {
			if strings.HasPrefix(k, "lh_") || k == "leasehold" {
				return nil, fmt.Errorf("task state: Assign %q: names starting with lh_ and the name leasehold belong to the machine", k)
			}
		}
	} else if _, ok := st["Assign"]; ok {
		return nil, fmt.Errorf("task state: \"Assign\" must be an object")
	}
	return st, nil
}

// jsonPathKey finds an object key ending in ".$" anywhere in v.
func jsonPathKey(v any) string {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if strings.HasSuffix(k, ".$") {
				return k
			}
			if s := jsonPathKey(x); s != "" {
				return s
			}
		}
	case []any:
		for _, x := range v {
			if s := jsonPathKey(x); s != "" {
				return s
			}
		}
	}
	return ""
}

func positiveInt(v any, field string) (int64, error) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Errorf("task state: %s must be a number, got %v", field, v)
	}
	i, err := n.Int64()
	if err != nil || i < 1 || i > 99999999 {
		return 0, fmt.Errorf("task state: %s %s: want a whole number of seconds from 1 to 99999999", field, n)
	}
	return i, nil
}

// retriesError reports the first retrier of retry (checked by
// retryBudget) whose ErrorEquals names name.
func retriesError(retry any, name string) (int, bool) {
	list, _ := retry.([]any)
	for i, r := range list {
		m, _ := r.(map[string]any)
		errs, _ := m["ErrorEquals"].([]any)
		if slices.Contains(errs, any(name)) {
			return i, true
		}
	}
	return 0, false
}

// validFinalErrors checks the error names declared final.
func validFinalErrors(names []string) error {
	seen := map[string]bool{}
	for _, n := range names {
		switch {
		case n == "" || len(n) > 256 || !utf8.ValidString(n) || strings.TrimSpace(n) != n:
			return fmt.Errorf("final errors: %q: want an error name (1-256 characters, no leading or trailing space)", n)
		case n == "States.ALL" || slices.Contains(timeoutErrors, n):
			return fmt.Errorf("final errors: %s: after a timeout the work may still run; it cannot be final", n)
		case seen[n]:
			return fmt.Errorf("final errors: %s is named twice", n)
		}
		seen[n] = true
	}
	return nil
}

// retryBudget returns how often the task may start (1 + every retrier's
// MaxAttempts) and the longest total of its retry intervals.
func retryBudget(retry any) (int, time.Duration, error) {
	if retry == nil {
		return 1, 0, nil
	}
	list, ok := retry.([]any)
	if !ok {
		return 0, 0, fmt.Errorf("task state: \"Retry\" must be a list")
	}
	attempts, total := 1, 0.0
	for i, r := range list {
		m, ok := r.(map[string]any)
		if !ok {
			return 0, 0, fmt.Errorf("task state: Retry[%d] must be an object", i)
		}
		errs, _ := m["ErrorEquals"].([]any)
		if len(errs) == 0 {
			return 0, 0, fmt.Errorf("task state: Retry[%d] needs ErrorEquals", i)
		}
		for _, e := range errs {
			switch e {
			case "States.ALL", "States.Timeout", "States.HeartbeatTimeout":
				return 0, 0, fmt.Errorf("task state: Retry[%d] retries %v: a retry after a timeout would start the task again while the timed-out attempt may still run; retry named errors instead", i, e)
			}
		}
		num := func(field string, def, lo float64) (float64, error) {
			v, ok := m[field]
			if !ok {
				return def, nil
			}
			n, ok := v.(json.Number)
			f, err := n.Float64()
			if !ok || err != nil || f < lo || math.IsInf(f, 0) {
				return 0, fmt.Errorf("task state: Retry[%d].%s %v: want a number of at least %v", i, field, v, lo)
			}
			return f, nil
		}
		interval, err := num("IntervalSeconds", 1, 1)
		if err != nil {
			return 0, 0, err
		}
		maxAttempts, err := num("MaxAttempts", 3, 0)
		if err != nil {
			return 0, 0, err
		}
		rate, err := num("BackoffRate", 2, 1)
		if err != nil {
			return 0, 0, err
		}
		maxDelay, err := num("MaxDelaySeconds", math.Inf(1), 1)
		if err != nil {
			return 0, 0, err
		}
		if maxAttempts > 1000 {
			return 0, 0, fmt.Errorf("task state: Retry[%d].MaxAttempts %v: more than 1000", i, maxAttempts)
		}
		attempts += int(maxAttempts)
		d := interval
		for k := 0; k < int(maxAttempts) && total < 1e9; k++ {
			total += min(d, maxDelay)
			d *= rate
		}
	}
	if total >= 1e9 {
		return 0, 0, fmt.Errorf("task state: the retry intervals add up to more than 30 years")
	}
	return attempts, time.Duration(math.Ceil(total)) * time.Second, nil
}

// planTask fills in p for a Task state: its timeout per attempt (the
// state's own if it is shorter), its retries and what its work may
// outlast.
func (c *Config) planTask(p *Plan, avail time.Duration) error {
	st, err := c.parseTask()
	if err != nil {
		return err
	}
	if invokesLambda.MatchString(st["Resource"].(string)) {
		if c.LambdaTimeout == 0 {
			return fmt.Errorf("lambda timeout: required with a task that invokes a Lambda function (Step Functions' timeout does not stop a running function)")
		}
		if c.TaskGrace != 0 {
			return fmt.Errorf("task grace: not with a task that invokes a Lambda function (it is bounded by the lambda timeout)")
		}
		if len(c.FinalErrors) > 0 {
			return fmt.Errorf("final errors: not with a task that invokes a Lambda function (the machine sorts a Lambda function's errors itself)")
		}
		p.Overrun = c.LambdaTimeout + LambdaStartAllowance
		p.HoldErrors = append(append([]string{}, timeoutErrors...), lambdaUnsureErrors...)
	} else {
		if c.LambdaTimeout != 0 {
			return fmt.Errorf("lambda timeout: this task does not invoke a Lambda function; give --task-grace")
		}
		if err := validFinalErrors(c.FinalErrors); err != nil {
			return err
		}
		p.FinalErrors = append([]string{}, c.FinalErrors...)
		if c.TaskGrace < time.Second {
			return fmt.Errorf("task grace: required with a task that does not invoke Lambda (at least 1s): how long its work may go on after Step Functions stops waiting for it")
		}
		p.Overrun = roundUp(c.TaskGrace)
		p.HoldErrors = nil // every error but the final ones
	}
	p.Hold = p.Overrun
	if p.Attempts, p.Backoff, err = retryBudget(st["Retry"]); err != nil {
		return err
	}
	rest := avail - p.Backoff - p.Overrun
	if v, ok := st["TimeoutSeconds"]; ok {
		s, err := positiveInt(v, "TimeoutSeconds")
		if err != nil {
			return err
		}
		p.TaskTimeout = time.Duration(s) * time.Second
	} else {
		p.TaskTimeout = rest / time.Duration(p.Attempts) / time.Second * time.Second
	}
	p.Bound = time.Duration(p.Attempts)*p.TaskTimeout + p.Backoff + p.Overrun
	if p.TaskTimeout < time.Second || p.Bound > avail {
		return fmt.Errorf("ttl %s is too short for the task: %d attempts × timeout %s + %s of retry intervals + %s after a timeout (task grace or Lambda timeout) + margin %s + %s for the acquire do not fit (raise --ttl, or lower the task's MaxAttempts or TimeoutSeconds)",
			c.TTL, p.Attempts, max(p.TaskTimeout, time.Second), p.Backoff, p.Overrun, c.Margin, p.AcquireAllowance)
	}
	if v, ok := st["HeartbeatSeconds"]; ok {
		s, err := positiveInt(v, "HeartbeatSeconds")
		if err != nil {
			return err
		}
		if time.Duration(s)*time.Second >= p.TaskTimeout {
			return fmt.Errorf("task state: HeartbeatSeconds %d must be less than the task's timeout %s", s, p.TaskTimeout)
		}
		if i, ok := retriesError(st["Retry"], "States.TaskFailed"); ok {
			return fmt.Errorf("task state: Retry[%d] retries States.TaskFailed, which matches States.HeartbeatTimeout: with HeartbeatSeconds, a retry would start the task again while the attempt that missed its heartbeat may still run; retry named errors instead", i)
		}
	}
	return nil
}
