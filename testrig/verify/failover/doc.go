// Package failover is suite R18 of the verification plan
// (docs/verification.md): the fenced lock workload of package verify —
// worker processes, the fenced oracle, the overlap check, the token
// regression check and porcupine — run through repeated failovers of a
// replicated deployment, one row per deployment:
//
//   - Redis with Sentinel (redis*_test.go): a primary, two replicas and
//     three sentinels (testrig/redissentinel), the store following the
//     primary through a redis+sentinel:// URL; the primary is lost after
//     its replicas fell behind (SIGSTOP of the replicas, SIGKILL of the
//     primary), and in the row with WAIT also handed over by SENTINEL
//     FAILOVER. Its mutation (promotion-no-holdback) must be caught.
//
// Each deployment's files are its own (redis*.go, postgres*.go, ...).
// The package's TestMain (verify.Main, which makes the test binary a
// worker when the harness starts it as one) is in redis_test.go.
package failover
