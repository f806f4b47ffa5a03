// Package holders holds suite R17 of the verification plan, "the holder's
// side, on every surface": it drives each way of holding a lease — the Go
// leasehold.Client (over the lease server and Redis) and `leasehold run` —
// through the same faults (a backend that hangs, one that answers late, a
// store that says the lease is gone, the holder's own process stopped and
// resumed, and for `run` its keeper stopped and its process group killed)
// and checks, for each surface × fault, that loss is declared by the local
// deadline (within a stated bound), that no work is done after it, that
// every call given a timeout returns within it (plus a stated bound), and
// that a lost grant's token cannot be used again (a renew, release or
// fenced write with it is refused or harmless). The Step Functions
// machines' rows come from the scenarios of package stepfn.
//
// The suite is in the _test files; docs/verification.md describes it.
package holders
