// Package suites holds the quick in-process fault suites that suite R10
// (package mutation, one level up) runs in a binary built with the tag
// leasehold_mutations, once without a bug and ten times with each
// deliberate bug of package internal/mutation switched on, to show that
// each bug is caught. Each suite fails with a message starting
// "violations:" when its checkers find one.
//
//   - TestSuiteEngine: the lock workload on the server's engine with holders
//     paused (store calls blocked) for 1.5 × TTL; catches grant-no-recheck
//     and release-no-owner.
//   - TestSuiteRestart: the lock workload on the engine with its log, closed
//     and reopened on the same directory every 300 ms; catches token-reuse.
//   - TestSuiteReplyDelay: one client's acquire replies arrive 0.4 × TTL
//     late; holders cut off from the store hold to their local deadline;
//     catches deadline-from-reply.
//   - TestSuiteWallJump: the engine's clock's wall reading steps by 1 ms …
//     288 s every 150 ms; catches expiry-wall-clock.
//   - TestSuiteRedisRestart: the lock workload on a Redis without
//     persistence, SIGKILLed and restarted three times (down 100 ms; TTL
//     and hold-back 1 s; the model told of each restart, crash.StateLosses);
//     catches no-holdback. It needs redis-server, and fails (as not run)
//     without it.
//
// In a build without the tag the suites skip: TestMutationsCaught runs
// them.
package suites
