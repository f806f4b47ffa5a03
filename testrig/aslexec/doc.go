// Package aslexec is a test executor for AWS Step Functions state machines:
// the subset of the Amazon States Language that package sfn generates, run
// with the semantics the Step Functions developer guide documents for
// Standard workflows, so that tests can execute the generated machines —
// many at once, beside other clients of the same DynamoDB table — instead
// of only validating them. It is not AWS: where its reading of the
// documentation is wrong, its tests are wrong in the same way.
//
// # What it runs
//
// Machines in the JSONata query language (QueryLanguage "JSONata" at the
// top; a state may repeat it). States Pass, Task, Choice, Wait, Succeed
// and Fail, with the fields Next, End, Output, Assign, Arguments,
// Resource, TimeoutSeconds and HeartbeatSeconds (a number or an
// expression), Retry, Catch,
// Choices (Condition, Next, Output, Assign), Default, Seconds, Timestamp,
// Error and Cause, and the machine's TimeoutSeconds; a Task's Credentials
// are accepted and ignored (there is no IAM here). Any other state type or
// field is refused when the execution starts, with an error naming it.
//
//   - JSONata: every string that is "{% expression %}" as a whole, in any
//     field, is evaluated by the jsonata reference implementation (npm
//     jsonata) in one long-lived node process per Executor, which answers
//     concurrent requests out of order and caches compiled expressions.
//     The bindings are the variables and $states: input, context, result
//     (Task, in Output and Assign), errorOutput (in a Catch's Output and
//     Assign). Step Functions' extra functions $uuid and $parse exist;
//     $partition, $range and $hash do not. An expression whose value is
//     undefined, or that throws, fails the state with
//     States.QueryEvaluationError.
//   - $states.context: Execution.Id, Name, StartTime, Input, RoleArn,
//     RedriveCount, RedriveTime (after a redrive); State.Name,
//     EnteredTime (constant across the retries of one entry of the state)
//     and RetryCount; StateMachine.Id and Name. Times are UTC with
//     milliseconds, on the executor's clock plus its skew.
//   - Variables: Assign sets execution-wide variables. A state's Assign
//     and Output are evaluated together, both with the variables as they
//     were before the state, so Output never sees the same state's
//     assignments; in a Catch, Assign and Output see $states.errorOutput.
//     Only the top-level scope exists (there are no Map or Parallel
//     states).
//   - Retry: the first retrier whose ErrorEquals matches the error is the
//     one used; while its count is below MaxAttempts (default 3) it waits
//     IntervalSeconds (default 1) × BackoffRate (default 2) ^ retries,
//     capped at MaxDelaySeconds, and with JitterStrategy FULL a uniformly
//     random time between 0 and that; then the state's Catch applies.
//     "States.ALL" matches every error but States.Runtime and
//     States.DataLimitExceeded; "States.TaskFailed" matches every error but
//     States.Timeout, the States.Query* errors and those two.
//   - Catch: the first catcher that matches; its Output defaults to the
//     error output {"Error", "Cause"}, without "Cause" when the error has
//     none (an empty cause).
//   - TimeoutSeconds on a Task bounds each attempt: when it passes, the
//     attempt fails with States.Timeout and the task itself goes on — its
//     goroutine is not stopped, and what it does later is simply ignored,
//     as Step Functions ignores a Lambda function that outlives the state.
//     The machine's TimeoutSeconds ends the execution TIMED_OUT.
//   - HeartbeatSeconds on a Task: an attempt whose task calls
//     Call.Heartbeat (SendTaskHeartbeat) less often than that fails with
//     States.HeartbeatTimeout, and the task goes on, as after a timeout
//     (States.TaskFailed in a Retry matches that error: the retry runs
//     beside the attempt that missed its heartbeat).
//   - A Wait's Timestamp loses its fraction of a second, as Step
//     Functions truncates it: "...T10:00:00.999Z" waits until 10:00:00.
//   - Stop (StopExecution) ends the execution ABORTED at once; a task in
//     progress goes on.
//   - Redrive (RedriveExecution) restarts a FAILED, TIMED_OUT or ABORTED
//     execution from the state it ended in (a Fail state runs again),
//     with the same execution ARN, RedriveCount + 1, the input and the
//     variables that state was entered with, fresh retry counts and a new
//     EnteredTime; the machine's TimeoutSeconds counts from the redrive.
//
// # Tasks
//
//   - arn:aws:states:::dynamodb:getItem, putItem, updateItem and
//     deleteItem send the Arguments as the body of the DynamoDB API request
//     (X-Amz-Target DynamoDB_20120810.<Action>, signed with Signature
//     Version 4 and fixed test credentials) to Options.DynamoDB — dynalite
//     in the tests — and give the API's response as the result. A DynamoDB
//     error becomes DynamoDB.<exception name> (for example
//     DynamoDB.ConditionalCheckFailedException) with its message as the
//     cause; a transport error becomes DynamoDB.AmazonDynamoDBException.
//   - arn:aws:states:::lambda:invoke calls the Go function registered
//     under the FunctionName's name with the Payload and gives
//     {"ExecutedVersion", "Payload", "StatusCode"}; a bare Lambda function
//     ARN as the Resource takes the Arguments as the payload and gives the
//     function's result itself. A function's error is its own (type
//     "Error", or the *Failure it returned, e.g. Lambda.ServiceException);
//     a function that outlives its own Lambda.Timeout is killed:
//     Sandbox.Timedout.
//   - Options.Resources adds other resources as Go functions.
//
// # Time
//
// Waits, retry intervals and timeouts run on Options.Clock (package
// clock): the real clock by default, or a clock.Skewed running faster than
// real time for unit tests (assert on order and counts, never on speed).
// The times a machine sees are that clock plus Options.Skew, so several
// executors can disagree about the time as machines in different regions
// or behind a wrong clock would; DynamoDB items written from those times
// are then as wrong as the skew.
//
// # Not implemented
//
// Map, Parallel, JSONPath, .sync and .waitForTaskToken
// integrations, Express workflows (at-least-once execution), the history
// size limit, payload size limits (States.DataLimitExceeded), and the
// service's own retries and delays. A running execution is not persisted:
// closing the Executor forgets it.
package aslexec
