// Package stepfn is suite R14 of the verification plan: the Step Functions
// machines that package sfn generates, executed by the test executor of
// package aslexec, contend for one lock with Go workers (the dynamodb
// store) and "leasehold run --store dynamodb://..." processes on one
// dynalite table, under faults — task failures, service errors and their
// retries, task bodies that run past the state's timeout (and go on),
// aborts while the task runs, redrives of aborted and failed executions,
// and executors whose clocks are skewed within the machines'
// MaxClockSkew.
//
// Every protected piece of work — a machine's Lambda body, a Go worker's
// critical section, a run command — does a fenced increment of the verify
// oracle with its fencing token and is recorded as a critical section
// from its start to its end (a Lambda body killed at its own timeout ends
// there). The checks: no two critical sections of the lock overlap in
// time; every critical section's token is above the token of every
// section that ended before it began, across all clients; the oracle
// found no lost update or stale write accepted.
//
// A trial (Env.Run) runs one lock; several trials can share an Env (one
// table, one oracle, the executors). See docs/verification.md (R14) for
// the tiers, the mutation sfn-old-redrive, and what R14 does not show.
package stepfn
