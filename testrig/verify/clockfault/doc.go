// Package clockfault is suite R8 of the verification plan: clock faults
// injected into clients and stores that run in this process, each client
// with its own clock (clock.Skewed), checked against the truth — the real
// CLOCK_MONOTONIC of the recorder — by the harness's checkers and oracle.
//
//   - R8-jump: every critical section steps its holder's monotonic reading
//     forward or backward by 1 ms … 288 s (a stepped reading: its boot-time
//     reading runs true), and steps the store clock's wall reading likewise.
//     Forward, the holder gives the lease up early; backward, its boot-time
//     deadline still ends its belief in time. The stores judge expiry on
//     their monotonic or boot-time clock, which cannot be stepped, so a
//     wall step must change nothing. 0 violations.
//   - R8-skew1: client clocks 1 % slow or fast — the default drift budget
//     rho — while holders are cut off from the store after each grant and
//     hold to the last moment they believe they hold: 0 violations.
//   - R8-skew5-fenced / -unfenced: the same with 5 %: a slow holder believes
//     it holds past the store's expiry, which the overlap checker sees.
//     Fenced, the oracle refuses its late writes (0 lost updates or stale
//     writes accepted); unfenced, the control, the checkers catch it in at
//     least 9 of 10 runs.
//   - R8-suspend: a holder's clock is suspended for 2 × TTL (monotonic
//     reading and timers stand still, boot time goes on) while its
//     goroutine and its store calls are blocked: after resuming, it reports
//     its lease lost every time.
//
// The stores are the ones that take an injected clock: memory, sqlite, and
// the server's engine in-process.
package clockfault
