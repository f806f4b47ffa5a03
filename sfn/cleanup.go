package sfn

import (
	"encoding/json"
	"fmt"
)

// States of the cleanup machine.
const (
	CleanupStateHold     = "Hold"
	CleanupStateRelease  = "ReleaseDeadExecution"
	CleanupStateNotHeld  = "NotHeld"
	CleanupStateReleased = "Released"
)

// DeadStatuses are the execution statuses after which the cleanup machine
// releases the lock a dead execution may still hold.
var DeadStatuses = []string{"FAILED", "TIMED_OUT", "ABORTED"}

// Cleanup returns the cleanup machine (ASL, JSONata): started by the rule
// of EventPattern with a "Step Functions Execution Status Change" event of
// an execution of the lock machine that ended FAILED, TIMED_OUT or
// ABORTED, it waits until Plan.Hold after the execution's stopDate (the work the execution started may still
// run that long: the Lambda function's timeout plus 10 s, or TaskGrace)
// and then releases the lock with one conditional UpdateItem, only if
// the dead execution still holds it (Owner is its ARN, Held) with a
// grant made before it stopped (AcquiredAtMs <= the event's stopDate), so
// that a grant of the same execution after a redrive is left alone. It
// succeeds whether or not it released anything (the output says which).
func Cleanup(c Config) ([]byte, error) {
	m, err := c.cleanupMachine()
	if err != nil {
		return nil, err
	}
	return json.MarshalIndent(m, "", "  ")
}

func (c *Config) cleanupMachine() (obj, error) {
	p, err := c.Plan()
	if err != nil {
		return nil, err
	}
	release := c.releaseTask("#owner = :dead AND Held = :true AND AcquiredAtMs <= :stopped", obj{"#owner": "Owner"}, obj{
		":dead":    obj{"S": js(`$states.input.detail.executionArn`)},
		":stopped": obj{"N": js(`$string($states.input.detail.stopDate)`)},
		":true":    obj{"BOOL": true},
	})
	release["Catch"] = []any{obj{"ErrorEquals": []any{conditionFailed}, "Next": CleanupStateNotHeld}}
	release["Output"] = js(`{"released": true, "execution": $states.input.detail.executionArn}`)
	release["Next"] = CleanupStateReleased
	return obj{
		"Comment": fmt.Sprintf("Releases the leasehold lock %q (DynamoDB table %s) held by an execution that ended FAILED, TIMED_OUT or ABORTED, %d s after it stopped.",
			c.Lock, c.Table, seconds(p.Hold)),
		"QueryLanguage": "JSONata",
		"StartAt":       CleanupStateHold,
		"States": obj{
			CleanupStateHold: obj{
				"Type":      "Wait",
				"Comment":   "The work the dead execution started may run this long after it stopped.",
				"Timestamp": waitUntil(fmt.Sprintf(`$states.input.detail.stopDate + %d`, p.Hold.Milliseconds())),
				"Next":      CleanupStateRelease,
			},
			CleanupStateRelease:  release,
			CleanupStateReleased: obj{"Type": "Succeed"},
			CleanupStateNotHeld: obj{
				"Type":   "Pass",
				"Output": js(`{"released": false, "execution": $states.input.detail.executionArn}`),
				"End":    true,
			},
		},
	}, nil
}

// EventPattern is the EventBridge event pattern that matches the end of
// an execution of the state machine machineARN with one of DeadStatuses.
// machineARN may be any JSON value a template puts there (a reference).
func EventPattern(machineARN any) map[string]any {
	return obj{
		"source":      []any{"aws.states"},
		"detail-type": []any{"Step Functions Execution Status Change"},
		"detail": obj{
			"status":          toAny(DeadStatuses),
			"stateMachineArn": []any{machineARN},
		},
	}
}

func toAny(xs []string) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}
