package crash

import (
	"fmt"

	"github.com/leasehold/leasehold/testrig/enginetest"
	"github.com/leasehold/leasehold/testrig/verify"
)

// Restart is one SIGKILL of an engine and its restart, on the verify.Mono
// clock: killed when the signal was sent, up when it answered again.
type Restart struct{ Killed, Up int64 }

// ExtendsOnRecovery names the targets that, by design, give every lease
// they recover after a restart its full TTL again from the moment of
// recovery (their rows of enginetest.Engines say so): the lease server
// (its engine does not log renewals that keep the TTL, so it cannot know
// how much of a lease was left) and etcd (a member that becomes leader
// gives every lease its full TTL plus an election timeout). Their holders
// never notice: a holder's own deadline is earlier still. But a lease that
// was about to expire, or had expired with its expiry not yet logged, is
// reported held again for a TTL after the restart.
var ExtendsOnRecovery = func() map[string]bool {
	m := map[string]bool{}
	for _, e := range enginetest.Engines {
		if e.ExtendsOnRecovery {
			m[e.Store] = true
		}
	}
	return m
}()

// RecoveryRenewals returns a copy of h with the effect of such a recovery
// made explicit for the model: for every restart and every key, an
// indeterminate renewal, called at the kill, by the holder of the highest
// token granted (definitely) before the kill that was not definitely
// released before it — the grant the engine may have recovered. The model
// lets an indeterminate renewal either take effect or not, and one that
// does keeps the lease alive for as long as "held" answers name it; it
// changes nothing for grants, which the model judges by the holder's own
// call times (a holder never counts on a renewal it did not see confirmed),
// so no safety property is relaxed: only "held" answers naming the
// recovered holder, and its renewals, become acceptable after a restart.
// It returns the number of renewals added (recorded under worker
// "recovery"; they count in Result.Ops and Result.Indeterminate).
func RecoveryRenewals(h *verify.History, restarts []Restart) (*verify.History, int) {
	out := &verify.History{Events: append([]verify.Event(nil), h.Events...)}
	seq := int64(0)
	for key, ops := range h.LeaseOps() {
		for i, r := range restarts {
			var best *struct {
				owner string
				token uint64
				ttl   int64
			}
			for _, op := range ops {
				if op.Kind != "acquire" || !op.OK || op.Unknown || op.Call >= r.Killed {
					continue
				}
				if best == nil || op.OutToken > best.token {
					best = &struct {
						owner string
						token uint64
						ttl   int64
					}{op.Owner, op.OutToken, int64(op.TTL)}
				}
			}
			if best == nil {
				continue
			}
			released := false
			for _, op := range ops {
				if op.Kind == "release" && op.OK && !op.Unknown && op.Owner == best.owner && op.Token == best.token && op.Return < r.Killed {
					released = true
					break
				}
			}
			if released {
				continue
			}
			seq++
			out.Events = append(out.Events, verify.Event{E: "call", Worker: "recovery", Seq: seq, Proc: fmt.Sprintf("restart%d", i),
				Key: key, Op: "renew", Owner: best.owner, Token: best.token, TTL: best.ttl, T: r.Killed})
		}
	}
	return out, int(seq)
}

// LosesState names the targets whose engine may lose acknowledged writes
// when it is killed: Redis without persistence loses everything, Redis
// with RDB snapshots what changed since the last one. The Redis store
// promises what the model's "lose" operation allows (see StateLosses).
var LosesState = map[string]bool{"redis-nopersist": true, "redis-rdb": true}

// StateLosses returns a copy of h with, for every restart and every key
// of h, a "lose" operation from the kill to the moment the engine answered
// again (recorded under worker "restart"; they count in Result.Ops). The
// model lets each lose nothing, or the lease and its fence: after it, no
// one holds the lease or its latest grant, so the holder's renewals and
// releases may be refused (the holder reports its lease lost), while a new
// grant still needs the lost holder's lease to have expired by the
// holder's own call times, and a token above every earlier one. That is
// exactly what the Redis store's hold-back and token floor promise after a
// restart that lost data; nothing else is relaxed. It returns the number
// of operations added.
func StateLosses(h *verify.History, restarts []Restart) (*verify.History, int) {
	out := &verify.History{Events: append([]verify.Event(nil), h.Events...)}
	keys := map[string]bool{}
	for _, ev := range h.Events {
		if ev.E == "call" && ev.Key != "" {
			keys[ev.Key] = true
		}
	}
	seq := int64(0)
	for i, r := range restarts {
		up := r.Up
		if up == 0 || up < r.Killed {
			up = verify.Mono() // not restarted: the loss may come any time until now
		}
		for key := range keys {
			seq++
			proc := fmt.Sprintf("restart%d", i)
			out.Events = append(out.Events,
				verify.Event{E: "call", Worker: "restart", Seq: seq, Proc: proc, Key: key, Op: "lose", T: r.Killed},
				verify.Event{E: "ret", Worker: "restart", Seq: seq, Proc: proc, Key: key, Op: "lose", OK: true, T: up})
		}
	}
	return out, int(seq)
}
