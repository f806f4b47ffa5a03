package crash

import (
	"fmt"
	"sort"

	"github.com/leasehold/leasehold/storetest"
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
// indeterminate renewal, called at the kill, by the holder of each grant
// the engine may have recovered: every grant whose acquire was called
// before the kill, that was not definitely released before it, and whose
// token is not below that of a grant definitely made (returned) before it.
// Not only the highest token: an acquire called before the kill may have
// been granted only after it (a waiter answered later), and then the
// lease the engine recovered was the grant before it (R7 saw etcd's new
// leader revive an expired lease that a lazy revoke had not yet removed,
// while the next waiter's acquire was in flight). The model lets an
// indeterminate renewal either take effect or not, takes it only for the
// current holder, and one that does keeps the lease alive for as long as
// "held" answers name it; it changes nothing for grants, which the model
// judges by the holder's own call times (a holder never counts on a
// renewal it did not see confirmed), so no safety property is relaxed:
// only "held" answers naming a recovered holder, and its renewals, become
// acceptable after a restart. It returns the number of renewals added
// (recorded under worker "recovery"; they count in Result.Ops and
// Result.Indeterminate).
func RecoveryRenewals(h *verify.History, restarts []Restart) (*verify.History, int) {
	out := &verify.History{Events: append([]verify.Event(nil), h.Events...)}
	seq := int64(0)
	keys := h.LeaseOps()
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names) // the same history for the same input
	for _, key := range names {
		ops := keys[key]
		for i, r := range restarts {
			floor := uint64(0) // the highest token definitely granted before the kill
			for _, op := range ops {
				if op.Kind == "acquire" && op.OK && !op.Unknown && op.Return < r.Killed && op.OutToken > floor {
					floor = op.OutToken
				}
			}
			for _, op := range ops {
				if op.Kind != "acquire" || !op.OK || op.Unknown || op.Call >= r.Killed || op.OutToken < floor {
					continue
				}
				if releasedBefore(ops, op.Owner, op.OutToken, r.Killed) {
					continue
				}
				seq++
				out.Events = append(out.Events, verify.Event{E: "call", Worker: "recovery", Seq: seq, Proc: fmt.Sprintf("restart%d", i),
					Key: key, Op: "renew", Owner: op.Owner, Token: op.OutToken, TTL: int64(op.TTL), T: r.Killed})
			}
		}
	}
	return out, int(seq)
}

// releasedBefore reports whether ops hold a release of owner's token that
// definitely succeeded before t.
func releasedBefore(ops []storetest.LeaseOp, owner string, token uint64, t int64) bool {
	for _, op := range ops {
		if op.Kind == "release" && op.OK && !op.Unknown && op.Owner == owner && op.Token == token && op.Return < t {
			return true
		}
	}
	return false
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
