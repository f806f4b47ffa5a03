package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/sfn"
)

const sfnLong = `Sfn writes an AWS Step Functions state machine (ASL, JSONata query
language, Standard workflows) that runs a task only while holding the lock
LOCK, kept in the DynamoDB table TABLE with the layout of leasehold's
DynamoDB store: state machines, "leasehold run --store dynamodb://TABLE" and
Go programs using the same table exclude each other on the same lock. With
--format it writes instead the cleanup machine, or a CloudFormation (SAM)
template or Terraform JSON configuration that deploys everything in one
step: the machine and its role, the table, the cleanup machine with the
EventBridge rule that starts it, and the machine's log group with an alarm
on Leasehold.LeaseLost (the log level, the log retention and the alarm's
SNS topic are template parameters; templates need --lambda: a --task's
permissions cannot be known).

The machine acquires the lock with one conditional UpdateItem, waits a
random, growing, capped time between attempts for up to --wait (default:
the TTL plus the task's bound, so it outlasts a holder's task) and then
fails with Leasehold.LockNotAcquired. Before the task it checks that the
rest of the lease, counted from the first acquire attempt, covers the
task's bound: every attempt's timeout, the backoff of its retries, and what
the work may run on after Step Functions stops waiting for it (the Lambda
function's own timeout, --lambda-timeout, plus 10s to start; or
--task-grace). Redrives are not reruns of the old grant: a redriven
execution never reaches the task without acquiring again (with a new
fencing token), after waiting until the earlier attempt's work can no
longer run (at most that long). After a task timeout the lock is likewise
kept until the work can no longer run, and so it is after a Lambda service
error that leaves open whether the function runs, after any error of a
--task that does not invoke Lambda (unless named in --final-errors), and
after any error once the task has been retried. The machine releases the lock after
success and after every catchable failure (then fails with the task's own
error), and fails with Leasehold.LeaseLost when another grant had replaced
its own. The task gets the fencing token: a Lambda function in its payload
({"leasehold": {"lock", "owner", "token"}}; the input must be a JSON object
without that key, else Leasehold.InvalidInput), a --task state as the
variable $leasehold.

The work is either a Lambda function (--lambda ARN, with --lambda-timeout)
or any Task state given as a JSON file in JSONata form (--task FILE,
without Catch; with --lambda-timeout if it invokes Lambda, else
--task-grace). Options that do not fit together (a task that does not fit
in the TTL, attempts that cannot cover the wait) are refused with an error
saying which.

An execution that dies without running its Catch (stopped, timed out as a
whole) keeps the lock until the cleanup machine releases it (when the
work can no longer run) or the lease expires. See docs/step-functions.md
for what is guaranteed, deployment and alarms.

Exit codes: 0 success, 64 usage error.`

const sfnExample = `  leasehold sfn --table leasehold --lock nightly-import --lambda-timeout 5m \
      --lambda arn:aws:lambda:eu-west-1:123456789012:function:import > machine.json

  leasehold sfn --table leasehold --lock nightly-import --lambda-timeout 5m \
      --lambda arn:aws:lambda:eu-west-1:123456789012:function:import \
      --format cloudformation --output template.json

  leasehold sfn --table leasehold --lock batch --task ecs-task.json --task-grace 2m --ttl 2h --output machine.json

  leasehold sfn --table leasehold --lock batch --task ecs-task.json --task-grace 2m \
      --final-errors States.TaskFailed --output machine.json`

func newSfnCmd(e *env) *cobra.Command {
	var c sfn.Config
	var taskFile, output, format string
	cmd := &cobra.Command{
		Use:     "sfn --table TABLE --lock LOCK (--lambda ARN --lambda-timeout D | --task FILE (--task-grace D | --lambda-timeout D))",
		Short:   "Write a Step Functions state machine that runs a task under a lock (or its templates)",
		Long:    sfnLong,
		Example: sfnExample,
		Args:    cobra.NoArgs,
		RunE: wrapRun(func(cmd *cobra.Command, args []string) error {
			if taskFile != "" {
				b, err := os.ReadFile(taskFile)
				if err != nil {
					return usagef("sfn: --task: %v", err)
				}
				c.Task = json.RawMessage(b)
			}
			var out []byte
			var err error
			switch format {
			case "machine":
				out, err = sfn.Generate(c)
			case "cleanup":
				out, err = sfn.Cleanup(c)
			case "cloudformation":
				out, err = sfn.CloudFormation(c)
			case "terraform":
				out, err = sfn.Terraform(c)
			default:
				return usagef("sfn: --format %q: want machine, cleanup, cloudformation or terraform", format)
			}
			if err != nil {
				return usagef("sfn: %v", err)
			}
			out = append(out, '\n')
			if output == "" || output == "-" {
				_, err = e.stdout.Write(out)
				return err
			}
			if err := os.WriteFile(output, out, 0o644); err != nil {
				return exitf(ExitInternal, "sfn: %v", err)
			}
			fmt.Fprintf(e.stderr, "leasehold: wrote %s\n", output)
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVar(&c.Table, "table", "", "DynamoDB table with the leasehold layout (required)")
	f.StringVar(&c.Lock, "lock", "", "lock name: the item's LockKey (required; the store's name rules)")
	f.StringVar(&c.LambdaARN, "lambda", "", "ARN of the Lambda function to run under the lock")
	durationFlag(f, &c.LambdaTimeout, "lambda-timeout", 0, "the Lambda function's own timeout (required with --lambda, and with a --task that invokes Lambda)")
	f.StringVar(&taskFile, "task", "", "file with a Task state (JSON, JSONata form) to run under the lock")
	durationFlag(f, &c.TaskGrace, "task-grace", 0, "how long a --task's work may go on after Step Functions stops waiting for it (required with a --task that does not invoke Lambda)")
	f.StringSliceVar(&c.FinalErrors, "final-errors", nil, "error names of a --task after which its work has certainly ended, so the lock is released at once (comma-separated; default none: after any error of a --task that does not invoke Lambda the lock is kept for --task-grace)")
	durationFlag(f, &c.TTL, "ttl", time.Hour, "lease time: a dead execution's lock frees itself after it")
	durationFlag(f, &c.Margin, "margin", 0, "lease time left after the task's bound, for the release (default min(1m, max(2s, TTL/10)))")
	durationFlag(f, &c.MaxClockSkew, "max-clock-skew", time.Second, "clock skew allowed when judging expiry (as the DynamoDB store)")
	durationFlag(f, &c.Wait, "wait", 0, "how long to wait for the lock before failing with Leasehold.LockNotAcquired (default the TTL plus the task's bound)")
	f.IntVar(&c.MaxAttempts, "max-attempts", 0, "acquire attempts at most (default what --wait needs; at most 2000)")
	durationFlag(f, &c.MaxDelay, "max-delay", 0, "longest random wait between attempts (default 30s, more when --wait needs it)")
	f.StringVar(&c.Comment, "comment", "", "the machine's Comment")
	f.StringVar(&format, "format", "machine", "what to write: machine, cleanup (the cleanup machine), cloudformation (a CloudFormation/SAM template) or terraform (a .tf.json file)")
	f.StringVar(&c.Name, "name", "", "the state machine's name in templates (default leasehold-LOCK)")
	f.BoolVar(&c.ExistingTable, "existing-table", false, "templates use the existing table TABLE instead of creating it")
	f.StringVarP(&output, "output", "o", "", "write to this file (default stdout)")
	return cmd
}
