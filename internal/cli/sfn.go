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
language) that runs a task only while holding the lock LOCK, kept in the
DynamoDB table TABLE with the layout of leasehold's DynamoDB store: state
machines, "leasehold run --store dynamodb://TABLE" and Go programs using the
same table exclude each other on the same lock.

The machine acquires the lock with one conditional UpdateItem (free,
released, expired, or already held by this execution: retries and redrives
are idempotent), waits a random, growing, capped time between attempts and
gives up after --max-attempts (failing with Leasehold.LockNotAcquired),
runs the task with a timeout that ends --margin before the lease expires,
releases the lock after success and after every catchable failure (then
fails with the task's own error), and fails with Leasehold.LeaseLost if the
lease expired before its release. The task receives the fencing token in
its payload (Lambda) so it can fence its writes.

The work is either a Lambda function (--lambda ARN) or any Task state given
as a JSON file in JSONata form (--task FILE, without Catch or Next).

Each attempt to acquire adds about 8 events to the execution history, so
--max-attempts 200 (the default) uses at most about 1,600 of the 25,000
events a Standard workflow may have. See docs/step-functions.md for the IAM
permissions, deployment and limits.

Exit codes: 0 success, 64 usage error.`

const sfnExample = `  leasehold sfn --table leasehold --lock nightly-import \
      --lambda arn:aws:lambda:eu-west-1:123456789012:function:import > machine.json

  leasehold sfn --table leasehold --lock batch --task ecs-task.json --ttl 2h --output machine.json`

func newSfnCmd(e *env) *cobra.Command {
	var c sfn.Config
	var taskFile, output string
	cmd := &cobra.Command{
		Use:     "sfn --table TABLE --lock LOCK (--lambda ARN | --task FILE)",
		Short:   "Write a Step Functions state machine that runs a task under a lock",
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
			def, err := sfn.Generate(c)
			if err != nil {
				return usagef("sfn: %v", err)
			}
			def = append(def, '\n')
			if output == "" || output == "-" {
				_, err = e.stdout.Write(def)
				return err
			}
			if err := os.WriteFile(output, def, 0o644); err != nil {
				return exitf(ExitInternal, "sfn: %v", err)
			}
			fmt.Fprintf(e.stderr, "leasehold: wrote %s\n", output)
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVar(&c.Table, "table", "", "DynamoDB table with the leasehold layout (required)")
	f.StringVar(&c.Lock, "lock", "", "lock name: the item's LockKey (required)")
	f.StringVar(&c.LambdaARN, "lambda", "", "ARN of the Lambda function to run under the lock")
	f.StringVar(&taskFile, "task", "", "file with a Task state (JSON, JSONata form) to run under the lock")
	f.DurationVar(&c.TTL, "ttl", time.Hour, "lease time: a dead execution's lock frees itself after it")
	f.DurationVar(&c.Margin, "margin", 0, "time the task's timeout leaves before the lease expires (default min(1m, TTL/10))")
	f.DurationVar(&c.MaxClockSkew, "max-clock-skew", time.Second, "clock skew allowed when judging expiry (as the DynamoDB store)")
	f.IntVar(&c.MaxAttempts, "max-attempts", 200, "acquire attempts before failing with Leasehold.LockNotAcquired")
	f.DurationVar(&c.MaxDelay, "max-delay", 30*time.Second, "longest random wait between attempts")
	f.StringVar(&c.Comment, "comment", "", "the machine's Comment")
	f.StringVarP(&output, "output", "o", "", "write the machine to this file (default stdout)")
	return cmd
}
