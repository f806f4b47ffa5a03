package sfn

import (
	"encoding/json"
	"fmt"
	"time"
)

// Names of the states of a generated machine, and the errors it fails with.
const (
	StateInit                = "Init"
	StateAcquire             = "Acquire"
	StateWaitForLock         = "WaitForLock"
	StateCanRetry            = "CanRetry"
	StateTask                = "Task"
	StateRelease             = "Release"
	StateReleaseAfterFailure = "ReleaseAfterFailure"
	StateTaskFailed          = "TaskFailed"
	StateLockNotAcquired     = "LockNotAcquired"
	StateLeaseLost           = "LeaseLost"

	ErrLockNotAcquired = "Leasehold.LockNotAcquired"
	ErrLeaseLost       = "Leasehold.LeaseLost"

	conditionFailed = "DynamoDB.ConditionalCheckFailedException"
)

// Expressions shared by the states (JSONata, inside {% %}).
const (
	exprNow = `$toMillis($states.context.State.EnteredTime)`
	exprMe  = `$states.context.Execution.Id`
)

type obj = map[string]any

func js(expr string) string { return "{% " + expr + " %}" }

// Generate returns the state machine definition (ASL, JSON, JSONata mode).
func Generate(c Config) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	task, err := c.taskState()
	if err != nil {
		return nil, err
	}
	comment := c.Comment
	if comment == "" {
		comment = fmt.Sprintf("Runs the task while holding the leasehold lock %q (DynamoDB table %s).", c.Lock, c.Table)
	}
	machine := obj{
		"Comment":       comment,
		"QueryLanguage": "JSONata",
		"StartAt":       StateInit,
		"States": obj{
			StateInit: obj{
				"Type":   "Pass",
				"Assign": obj{"lh_input": js(`$states.input`), "lh_attempt": 0},
				"Next":   StateAcquire,
			},
			StateAcquire:     c.acquireState(),
			StateWaitForLock: c.waitState(),
			StateCanRetry: obj{
				"Type":    "Choice",
				"Choices": []any{obj{"Condition": js(fmt.Sprintf(`$lh_attempt < %d`, c.MaxAttempts)), "Next": StateAcquire}},
				"Default": StateLockNotAcquired,
			},
			StateTask:                task,
			StateRelease:             c.releaseState(true),
			StateReleaseAfterFailure: c.releaseState(false),
			StateTaskFailed: obj{
				"Type":  "Fail",
				"Error": js(`$lh_error.Error`),
				"Cause": js(`$lh_error.Cause`),
			},
			StateLockNotAcquired: obj{
				"Type":  "Fail",
				"Error": ErrLockNotAcquired,
				"Cause": fmt.Sprintf("the lock %q stayed held for %d attempts", c.Lock, c.MaxAttempts),
			},
			StateLeaseLost: obj{
				"Type":  "Fail",
				"Error": ErrLeaseLost,
				"Cause": fmt.Sprintf("the lease on %q expired before it was released and may have been taken over: the task may have overlapped with another holder", c.Lock),
			},
		},
	}
	return json.MarshalIndent(machine, "", "  ")
}

func (c *Config) key() obj { return obj{"LockKey": obj{"S": c.Lock}} }

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
	return obj{
		"Type":     "Task",
		"Resource": "arn:aws:states:::dynamodb:updateItem",
		"Arguments": obj{
			"TableName": c.Table,
			"Key":       c.key(),
			// REMOVE: a previous Go holder's Data is not ours, and ExpiresAt
			// (the store's opt-in TTL clean-up) must not delete a held item.
			"UpdateExpression": "SET #owner = :me, RequestId = :me, Held = :true, TtlMs = :ttl, " +
				"ExpiresAtMs = :expires, AcquiredAtMs = :now REMOVE #data, ExpiresAt ADD #token :one",
			"ConditionExpression":      "attribute_not_exists(LockKey) OR Held = :false OR ExpiresAtMs < :stale OR #owner = :me",
			"ExpressionAttributeNames": obj{"#owner": "Owner", "#token": "Token", "#data": "Data"},
			"ExpressionAttributeValues": obj{
				":me":      obj{"S": js(exprMe)},
				":true":    obj{"BOOL": true},
				":false":   obj{"BOOL": false},
				":one":     obj{"N": "1"},
				":ttl":     obj{"N": fmt.Sprint(ttl)},
				":now":     num(exprNow),
				":expires": num(fmt.Sprintf(`%s + %d`, exprNow, ttl)),
				":stale":   num(fmt.Sprintf(`%s - %d`, exprNow, skew)),
			},
			"ReturnValues": "UPDATED_NEW",
		},
		"Assign": obj{"lh_token": js(`$states.result.Attributes.Token.N`)},
		"Output": js(`$lh_input`),
		"Retry":  retryThrottling(),
		"Catch":  []any{obj{"ErrorEquals": []any{conditionFailed}, "Next": StateWaitForLock}},
		"Next":   StateTask,
	}
}

// waitState waits a random time, growing with the attempts up to MaxDelay.
func (c *Config) waitState() obj {
	return obj{
		"Type": "Wait",
		"Seconds": js(fmt.Sprintf(`$max([1, $ceil($random() * $min([%d, $power(2, $lh_attempt)]))])`,
			int(c.MaxDelay/time.Second))),
		"Assign": obj{"lh_attempt": js(`$lh_attempt + 1`)},
		"Next":   StateCanRetry,
	}
}

// releaseState frees the lock if this execution still holds the grant it
// got; otherwise the lease was lost.
func (c *Config) releaseState(success bool) obj {
	st := obj{
		"Type":     "Task",
		"Resource": "arn:aws:states:::dynamodb:updateItem",
		"Arguments": obj{
			"TableName":                c.Table,
			"Key":                      c.key(),
			"UpdateExpression":         "SET Held = :false, ExpiresAtMs = :zero",
			"ConditionExpression":      "#owner = :me AND #token = :token",
			"ExpressionAttributeNames": obj{"#owner": "Owner", "#token": "Token"},
			"ExpressionAttributeValues": obj{
				":me":    obj{"S": js(exprMe)},
				":token": obj{"N": js(`$lh_token`)},
				":false": obj{"BOOL": false},
				":zero":  obj{"N": "0"},
			},
		},
		"Retry": retryThrottling(),
		"Catch": []any{obj{"ErrorEquals": []any{conditionFailed}, "Next": StateLeaseLost}},
	}
	if success {
		st["Output"] = js(`$states.input`) // the task's output
		st["End"] = true
	} else {
		st["Next"] = StateTaskFailed
	}
	return st
}

// taskState is the user's work, with its timeout inside the lease, its
// failures routed to the release, and the lease passed along.
func (c *Config) taskState() (obj, error) {
	timeout := int((c.TTL - c.Margin) / time.Second)
	var st obj
	if c.LambdaARN != "" {
		st = obj{
			"Type":     "Task",
			"Resource": "arn:aws:states:::lambda:invoke",
			"Arguments": obj{
				"FunctionName": c.LambdaARN,
				"Payload": js(fmt.Sprintf(`$type($states.input) = "object" ? $merge([$states.input, {"leasehold": {"lock": %q, "owner": %s, "token": $number($lh_token)}}]) : $states.input`,
					c.Lock, exprMe)),
			},
			"Output": js(`$states.result.Payload`),
			"Retry": []any{obj{
				"ErrorEquals":     []any{"Lambda.ServiceException", "Lambda.AWSLambdaException", "Lambda.SdkClientException", "Lambda.TooManyRequestsException"},
				"IntervalSeconds": 1, "MaxAttempts": 3, "BackoffRate": 2, "JitterStrategy": "FULL",
			}},
		}
	} else if err := json.Unmarshal(c.Task, &st); err != nil {
		return nil, fmt.Errorf("task state: %v", err)
	}
	if t, ok := st["TimeoutSeconds"].(float64); !ok || int(t) > timeout {
		st["TimeoutSeconds"] = timeout
	}
	delete(st, "End")
	delete(st, "TimeoutSecondsPath")
	st["Next"] = StateRelease
	st["Catch"] = []any{obj{
		"ErrorEquals": []any{"States.ALL"},
		"Assign":      obj{"lh_error": js(`$states.errorOutput`)},
		"Next":        StateReleaseAfterFailure,
	}}
	return st, nil
}
