//go:build leasehold_mutations

// Package mutation switches on deliberate bugs, for suite R10 of the
// verification plan: it checks that the fault suites catch each bug. The
// bugs exist only in binaries built with the tag leasehold_mutations; in
// any other build On is a constant false and the compiler drops them.
//
// A mutated binary runs the bug named by $LEASEHOLD_MUTATION (one at a
// time):
//
//   - grant-no-recheck: the server's engine grants a lease without looking
//     whether it is held and live.
//   - token-reuse: the engine's recovery forgets the token counter (it keeps
//     only a snapshot's, not the grants logged since), so tokens are reused
//     after a restart.
//   - release-no-owner: the engine releases a lease for any caller, without
//     checking owner and token.
//   - deadline-from-reply: the client takes a lease's local deadline from
//     the moment the reply arrived instead of before the request was sent.
//   - expiry-wall-clock: the engine judges expiry on its clock's wall
//     reading (clock.Wall) instead of the monotonic one.
//   - no-group-signal: "leasehold run" and "elect" signal only the
//     command's process, not its process group, so grandchildren outlive
//     the lease (suite R13).
//   - no-death-signal: the command of "leasehold run" and "elect" is not
//     stopped when its supervisor dies or stops renewing (suite R13).
//   - no-holdback: the Redis store never holds back grants after it
//     notices a restart of Redis (a new run_id, or its restart marker lost
//     with the data), as if the server were durable; the token floor
//     stays, so tokens still increase and what is caught is a second
//     holder (R10's TestSuiteRedisRestart, on a Redis without persistence
//     that is killed and restarted).
//   - pg-no-holdback: the PostgreSQL store records a new timeline (a
//     promoted replica) without a hold-back, so it grants at once after a
//     promotion; the token floor stays, so what is caught is a second
//     holder while the holder of a grant the promotion lost still believes
//     it holds the lease (R18's PostgreSQL row, TestR18PostgresMutation).
//   - promotion-no-holdback: the Redis store takes a replica promoted by a
//     failover (Sentinel) as if it had lost nothing: no hold-back after
//     the promotion is noticed (the token floor stays), so a grant the
//     old primary acknowledged and the replica never saw is granted again
//     while its holder still believes it holds it (suite R18,
//     testrig/verify/failover).
//   - sfn-old-redrive: the state machines of package sfn reach their Task
//     on a redrive without acquiring the lock again (the Task's timeout is
//     a plain number and CheckLease does not compare the redrive count),
//     so a redriven task runs with the earlier attempt's grant (suite R14).
package mutation

import (
	"os"
	"sync"
)

// Env names the bug to switch on.
const Env = "LEASEHOLD_MUTATION"

var active = sync.OnceValue(func() string { return os.Getenv(Env) })

// On reports whether the named bug is switched on: $LEASEHOLD_MUTATION,
// read once, names it.
func On(name string) bool { return active() == name }
