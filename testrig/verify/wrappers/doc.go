// Package wrappers holds suite R13 of the verification plan: the fault
// suite of the wrappers, "leasehold run" and "leasehold elect". Several
// supervisors (the leasehold command, built from this module) contend for
// one name each, on every store and through the server; each one's command
// is a process tree — a child and a grandchild, both this test binary
// again (MaybeCommand) — that records its lifetime as heartbeats in a
// shared log. Faults hit the supervisors' PIDs only, never their process
// groups, and the store; Check counts the overlaps of the trees'
// lifetimes, which must be 0. R13-freeze (TestR13Freeze) measures a fault
// leasehold cannot see: a supervisor stopped together with its command's
// group.
//
// See docs/verification.md (R13) for the claims, the faults, and which
// faults leasehold can and cannot see.
package wrappers
