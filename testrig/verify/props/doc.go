// Package props holds suite R1 of the verification plan: stateful property
// tests (pgregory.net/rapid) that drive every store that takes an injected
// clock — memory, SQLite and the server's engine — with random sequences of
// acquires, retried acquires, renewals, releases, reads, fake-clock jumps
// and, for the durable stores, restarts, and compare every answer with a
// small reference model of the lease rules. The tests are in the _test
// files; this file only documents the package.
package props
