package sfn

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/leasehold/leasehold/internal/mutation"
)

// Names of the states of a generated machine, and the errors it fails with.
const (
	StateInit                  = "Init"
	StateCheckInput            = "CheckInput"
	StateInvalidInput          = "InvalidInput"
	StateAcquire               = "Acquire"
	StateCanRetry              = "CanRetry"
	StateWaitForLock           = "WaitForLock"
	StateCheckLease            = "CheckLease"
	StateLeaseTooShort         = "LeaseTooShort"
	StateTask                  = "Task"
	StateAfterTaskError        = "AfterTaskError"
	StateHoldAfterTimeout      = "HoldAfterTimeout"
	StateRedriveHold           = "RedriveHold"
	StateRedriven              = "Redriven"
	StateRelease               = "Release"
	StateReleaseAfterFailure   = "ReleaseAfterFailure"
	StateTaskFailed            = "TaskFailed"
	StateLockNotAcquired       = "LockNotAcquired"
	StateLeaseLost             = "LeaseLost"
	StateLeaseLostAfterFailure = "LeaseLostAfterFailure"

	ErrLockNotAcquired = "Leasehold.LockNotAcquired"
	ErrLeaseLost       = "Leasehold.LeaseLost"
	ErrInvalidInput    = "Leasehold.InvalidInput"

	conditionFailed = "DynamoDB.ConditionalCheckFailedException"
)

// MutationOldRedrive names the deliberate bug (package internal/mutation)
// that writes the machine as it was before redrives were detected: a
// redriven Task runs with the grant of the earlier attempt.
const MutationOldRedrive = "sfn-old-redrive"

// Expressions shared by the states (JSONata, inside {% %}).
const (
	exprNow      = `$toMillis($states.context.State.EnteredTime)`
	exprMe       = `$states.context.Execution.Id`
	exprRedrives = `($exists($states.context.Execution.RedriveCount) ? $states.context.Execution.RedriveCount : 0)`
	// exprRetried: the Task state has been retried in this entry (read
	// in its Catch). Without a RetryCount it is taken to have been.
	exprRetried = `($exists($states.context.State.RetryCount) ? $states.context.State.RetryCount : 1) > 0`
)

// waitUntil is a Wait state's Timestamp for the time ms (an expression of
// milliseconds since the epoch) rounded up to a whole second: Step
// Functions drops a Timestamp's fraction of a second, which would end a
// hold up to 999 ms early.
func waitUntil(ms string) string {
	return js(`$fromMillis($ceil((` + ms + `) / 1000) * 1000)`)
}

type obj = map[string]any

func js(expr string) string { return "{% " + expr + " %}" }

// literal is s as a JSONata string literal (JSON's escapes, which JSONata
// reads the same way), so that a name is never evaluated as an expression.
func literal(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Generate returns the state machine definition (ASL, JSON, JSONata mode).
// It fills in c's defaults and fails, changing nothing else, when c is
// invalid.
func Generate(c Config) ([]byte, error) {
	m, _, err := c.machine()
	if err != nil {
		return nil, err
	}
	return json.MarshalIndent(m, "", "  ")
}

func (c *Config) machine() (obj, Plan, error) {
	p, err := c.Plan()
	if err != nil {
		return nil, p, err
	}
	task, err := c.taskState(p)
	if err != nil {
		return nil, p, err
	}
	comment := c.Comment
	if comment == "" {
		comment = fmt.Sprintf("Runs the task while holding the leasehold lock %q (DynamoDB table %s).", c.Lock, c.Table)
	}
	now := exprNow
	first := StateAcquire
	states := obj{
		StateInit: obj{
			"Type": "Pass",
			"Assign": obj{"lh_input": js(`$states.input`), "lh_attempt": 0,
				"lh_deadline": js(fmt.Sprintf(`%s + %d`, now, p.Wait.Milliseconds()))},
			"Next": first,
		},
		StateAcquire: c.acquireState(),
		StateCanRetry: obj{
			"Type": "Choice",
			"Choices": []any{obj{
				"Condition": js(fmt.Sprintf(`$lh_attempt + 1 < %d and %s + 1000 <= $lh_deadline`, p.MaxAttempts, now)),
				"Next":      StateWaitForLock,
			}},
			"Default": StateLockNotAcquired,
		},
		StateWaitForLock: c.waitState(p),
		StateCheckLease: obj{
			"Type": "Choice",
			"Choices": []any{obj{
				"Condition": js(c.leaseCovers(p)),
				"Next":      StateTask,
			}},
			"Default": StateLeaseTooShort,
		},
		StateLeaseTooShort: obj{
			"Type":    "Pass",
			"Comment": "Acquire took so long that the rest of the lease does not cover the task (or the execution was redriven): acquire again.",
			"Assign":  obj{"lh_attempt": js(`$lh_attempt + 1`)},
			"Next":    StateCanRetry,
		},
		StateTask: task,
		StateAfterTaskError: obj{
			"Type": "Choice",
			"Choices": []any{
				obj{"Condition": js(exprRedrives + ` != $lh_redrives`), "Next": StateRedriveHold},
				obj{"Condition": js(p.holdCondition()), "Next": StateHoldAfterTimeout},
			},
			"Default": StateReleaseAfterFailure,
		},
		StateHoldAfterTimeout: obj{
			"Type": "Wait",
			"Comment": "Step Functions stopped waiting for the work, which may still run: keep the lock until it cannot " +
				"(the task's bound from its entry, or the hold from now, whichever is sooner).",
			"Timestamp": waitUntil(fmt.Sprintf(`$min([$lh_task_entered + %d, %s + %d])`,
				p.Bound.Milliseconds(), now, p.Hold.Milliseconds())),
			"Next": StateReleaseAfterFailure,
		},
		StateRedriveHold: obj{
			"Type": "Wait",
			"Comment": "Redriven into the task: the earlier attempt's work may still run; wait until it cannot " +
				"(the earlier lease's expiry, or the hold from now, whichever is sooner), then acquire again.",
			"Timestamp": waitUntil(fmt.Sprintf(`$min([$lh_expires, %s + %d])`, now, p.Hold.Milliseconds())),
			"Next":      StateRedriven,
		},
		StateRedriven: obj{
			"Type": "Pass",
			"Assign": obj{"lh_attempt": 0,
				"lh_deadline": js(fmt.Sprintf(`%s + %d`, now, p.Wait.Milliseconds()))},
			"Output": js(`$lh_input`),
			"Next":   StateAcquire,
		},
		StateRelease:             c.releaseState(true),
		StateReleaseAfterFailure: c.releaseState(false),
		StateTaskFailed: obj{
			"Type":  "Fail",
			"Error": js(`$exists($lh_error.Error) ? $string($lh_error.Error) : "States.TaskFailed"`),
			"Cause": js(`$exists($lh_error.Cause) ? $string($lh_error.Cause) : "(the task's error has no cause)"`),
		},
		StateLockNotAcquired: obj{
			"Type":  "Fail",
			"Error": ErrLockNotAcquired,
			"Cause": fmt.Sprintf("the lock %s stayed held for the whole wait (%s, at most %d attempts)", literal(c.Lock), p.Wait, p.MaxAttempts),
		},
		StateLeaseLost: obj{
			"Type":  "Fail",
			"Error": ErrLeaseLost,
			"Cause": fmt.Sprintf("the lease on %s was taken over before it was released: the task may have overlapped with another holder", literal(c.Lock)),
		},
		StateLeaseLostAfterFailure: obj{
			"Type":  "Fail",
			"Error": ErrLeaseLost,
			"Cause": js(fmt.Sprintf(`%s & " ; the task had failed with " & ($exists($lh_error.Error) ? $string($lh_error.Error) : "States.TaskFailed") & ": " & ($exists($lh_error.Cause) ? $string($lh_error.Cause) : "(no cause)")`,
				literal(fmt.Sprintf("the lease on %q was taken over before it was released", c.Lock)))),
		},
	}
	if c.LambdaARN != "" {
		states[StateInit].(obj)["Next"] = StateCheckInput
		states[StateCheckInput] = obj{
			"Type": "Choice",
			"Choices": []any{obj{
				"Condition": js(`$type($states.input) = "object" and $not($exists($states.input.leasehold))`),
				"Next":      StateAcquire,
			}},
			"Default": StateInvalidInput,
		}
		states[StateInvalidInput] = obj{
			"Type":  "Fail",
			"Error": ErrInvalidInput,
			"Cause": `the input must be a JSON object without a "leasehold" key: the machine adds that key, with the lock, owner and fencing token, to the Lambda function's payload`,
		}
	}
	return obj{
		"Comment":       comment,
		"QueryLanguage": "JSONata",
		"StartAt":       StateInit,
		"States":        states,
	}, p, nil
}

// leaseCovers is CheckLease's condition: not redriven since Acquire, and
// the rest of the lease covers the task's bound and the margin.
func (c *Config) leaseCovers(p Plan) string {
	time := fmt.Sprintf(`%s + %d <= $lh_expires`, exprNow, (p.Bound + c.Margin).Milliseconds())
	if mutation.On(MutationOldRedrive) {
		return time
	}
	return fmt.Sprintf(`%s = $lh_redrives and %s`, exprRedrives, time)
}

func jsonList(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = literal(x)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

func (c *Config) key() obj { return obj{"LockKey": obj{"S": js(literal(c.Lock))}} }

func num(expr string) obj { return obj{"N": js(`$string(` + expr + `)`)} }

func retryThrottling() []any {
	return []any{obj{
		"ErrorEquals": []any{
			"DynamoDB.ProvisionedThroughputExceededException", "DynamoDB.ThrottlingException",
			"DynamoDB.RequestLimitExceeded", "DynamoDB.InternalServerErrorException", "DynamoDB.AmazonDynamoDBException",
		},
		"IntervalSeconds": 1, "MaxAttempts": 5, "BackoffRate": 2, "JitterStrategy": "FULL",
	}}
}

// acquireState takes the lock with one conditional UpdateItem.
func (c *Config) acquireState() obj {
	ttl, skew := c.TTL.Milliseconds(), c.MaxClockSkew.Milliseconds()
	// REMOVE: a previous Go holder's Data is not ours, and ExpiresAt (the
	// store's opt-in TTL clean-up) must not delete a held item.
	st := c.updateTask("SET #owner = :me, RequestId = :me, Held = :true, TtlMs = :ttl, "+
		"ExpiresAtMs = :expires, AcquiredAtMs = :now REMOVE #data, ExpiresAt ADD #token :one",
		"attribute_not_exists(LockKey) OR Held = :false OR ExpiresAtMs < :stale OR #owner = :me",
		obj{"#owner": "Owner", "#token": "Token", "#data": "Data"},
		obj{
			":me":      obj{"S": js(exprMe)},
			":true":    obj{"BOOL": true},
			":false":   obj{"BOOL": false},
			":one":     obj{"N": "1"},
			":ttl":     obj{"N": fmt.Sprint(ttl)},
			":now":     num(exprNow),
			":expires": num(fmt.Sprintf(`%s + %d`, exprNow, ttl)),
			":stale":   num(fmt.Sprintf(`%s - %d`, exprNow, skew)),
		})
	st["Arguments"].(obj)["ReturnValues"] = "UPDATED_NEW"
	st["Assign"] = obj{
		"lh_token":    js(`$states.result.Attributes.Token.N`),
		"lh_expires":  js(fmt.Sprintf(`%s + %d`, exprNow, ttl)),
		"lh_redrives": js(exprRedrives),
		"leasehold": js(fmt.Sprintf(`{"lock": %s, "owner": %s, "token": $number($states.result.Attributes.Token.N)}`,
			literal(c.Lock), exprMe)),
	}
	st["Output"] = js(`$lh_input`)
	st["Catch"] = []any{obj{"ErrorEquals": []any{conditionFailed}, "Next": StateCanRetry}}
	st["Next"] = StateCheckLease
	return st
}

// waitState waits between d/2 and d seconds, d = min(MaxDelay, 2^attempt)
// (the exponent capped at 20), and never past the wait's deadline.
func (c *Config) waitState(p Plan) obj {
	d := fmt.Sprintf(`$min([%d, $power(2, $min([$lh_attempt, 20]))])`, seconds(p.MaxDelay))
	return obj{
		"Type": "Wait",
		"Seconds": js(fmt.Sprintf(`$max([1, $min([$ceil(%[1]s / 2 + $random() * %[1]s / 2), $ceil(($lh_deadline - %[2]s) / 1000)])])`,
			d, exprNow)),
		"Assign": obj{"lh_attempt": js(`$lh_attempt + 1`)},
		"Next":   StateAcquire,
	}
}

// updateTask is a Task state with one UpdateItem of the lock's item:
// update if cond holds. Throttling is retried.
func (c *Config) updateTask(update, cond string, names, values obj) obj {
	return obj{
		"Type":     "Task",
		"Resource": "arn:aws:states:::dynamodb:updateItem",
		"Arguments": obj{
			"TableName":                 c.Table,
			"Key":                       c.key(),
			"UpdateExpression":          update,
			"ConditionExpression":       cond,
			"ExpressionAttributeNames":  names,
			"ExpressionAttributeValues": values,
		},
		"Retry": retryThrottling(),
	}
}

// releaseTask is an updateTask that frees the lock (not held, no expiry)
// if cond holds; values gives cond's values (:false and :zero are added).
func (c *Config) releaseTask(cond string, names, values obj) obj {
	values[":false"] = obj{"BOOL": false}
	values[":zero"] = obj{"N": "0"}
	return c.updateTask("SET Held = :false, ExpiresAtMs = :zero", cond, names, values)
}

// releaseState frees the lock if this execution still holds the grant it
// got; otherwise the lease was lost.
func (c *Config) releaseState(success bool) obj {
	st := c.releaseTask("#owner = :me AND #token = :token", obj{"#owner": "Owner", "#token": "Token"}, obj{
		":me":    obj{"S": js(exprMe)},
		":token": obj{"N": js(`$lh_token`)},
	})
	if success {
		st["Catch"] = []any{obj{"ErrorEquals": []any{conditionFailed}, "Next": StateLeaseLost}}
		st["Output"] = js(`$states.input`) // the task's output
		st["End"] = true
	} else {
		// The task's error stays in lh_error whatever the release does.
		st["Catch"] = []any{
			obj{"ErrorEquals": []any{conditionFailed}, "Next": StateLeaseLostAfterFailure},
			obj{"ErrorEquals": []any{"States.ALL"}, "Next": StateTaskFailed},
		}
		st["Next"] = StateTaskFailed
	}
	return st
}

// taskState is the user's work, with its timeout inside the lease (and
// failing when the execution was redriven since Acquire), its failures
// routed to the release, and the lease passed along.
func (c *Config) taskState(p Plan) (obj, error) {
	var st obj
	if c.LambdaARN != "" {
		st = obj{
			"Type":     "Task",
			"Resource": "arn:aws:states:::lambda:invoke",
			"Arguments": obj{
				"FunctionName": c.LambdaARN,
				"Payload":      js(`$merge([$states.input, {"leasehold": $leasehold}])`),
			},
			"Output": js(`$states.result.Payload`),
		}
	} else {
		var err error
		if st, err = c.parseTask(); err != nil {
			return nil, err
		}
		delete(st, "End")
		delete(st, "Next")
	}
	timeout := seconds(p.TaskTimeout)
	if mutation.On(MutationOldRedrive) {
		st["TimeoutSeconds"] = timeout
	} else {
		st["TimeoutSeconds"] = js(fmt.Sprintf(`(%s = $lh_redrives) ? %d : $error("leasehold: the execution was redriven into the task; the lock must be acquired again")`,
			exprRedrives, timeout))
	}
	st["Next"] = StateRelease
	st["Catch"] = []any{obj{
		"ErrorEquals": []any{"States.ALL"},
		"Assign": obj{"lh_error": js(`$states.errorOutput`),
			"lh_task_entered": js(exprNow), "lh_retried": js(exprRetried)},
		"Next": StateAfterTaskError,
	}}
	return st, nil
}
