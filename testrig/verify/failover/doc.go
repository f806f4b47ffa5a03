// Package failover is suite R18 of the verification plan
// (docs/verification.md): the fenced lock workload of package verify —
// worker processes, the fenced oracle, the overlap check, the token
// regression check and porcupine — and the leader-election recipe of R9
// (worker mode "election", also checked by recipes.CheckTerms: one leader
// per term, terms increasing) run through repeated failovers of a
// replicated deployment, one row per deployment and workload. Each
// deployment's fault loop is shared by its rows:
//
//   - Redis with Sentinel (redis*_test.go): a primary, two replicas and
//     three sentinels (testrig/redissentinel), the store following the
//     primary through a redis+sentinel:// URL; the primary is lost after
//     its replicas fell behind (SIGSTOP of the replicas, SIGKILL of the
//     primary), and in the rows with WAIT also handed over by SENTINEL
//     FAILOVER. Its mutation (promotion-no-holdback) must be caught.
//   - PostgreSQL with a promoted replica (postgres*_test.go,
//     testrig/pgreplica): the replica detached, the primary SIGKILLed, the
//     replica promoted. Its mutation (pg-no-holdback) must be caught.
//
// Each deployment's files are its own (redis*.go, postgres*.go, ...).
// The package's TestMain (verify.Main, which makes the test binary a
// worker when the harness starts it as one) is in redis_test.go.
package failover
