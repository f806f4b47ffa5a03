package crash

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/testrig/verify"
)

// lossHistory is one key: x is granted token 100 (TTL 1 s) at 0 ms; the
// engine is killed at 100 ms and answers again at 600 ms, having lost its
// state; x's renewal at 700 ms and its release at 720 ms are refused; y is
// granted token yToken, asked at yCall.
//
// With pending, z also asks at 50 ms and gets no answer (indeterminate: a
// grant that may have been made, at any moment after its call, and may
// have been undone).
func lossHistory(yCall time.Duration, yToken uint64, pending bool) (*verify.History, []Restart) {
	ms := int64(time.Millisecond)
	ttl := int64(time.Second)
	var evs []verify.Event
	op := func(seq int64, proc, kind, owner string, tok uint64, call, ret int64, ok bool, out uint64) {
		evs = append(evs,
			verify.Event{E: "call", Worker: "w0", Seq: seq, Proc: proc, Key: "k", Op: kind, Owner: owner, ReqID: owner + "-req", Token: tok, TTL: ttl, T: call},
			verify.Event{E: "ret", Worker: "w0", Seq: seq, Proc: proc, Key: "k", Op: kind, OK: ok, Out: out, T: ret})
	}
	op(1, "x", "acquire", "x", 0, 0, 1*ms, true, 100)
	op(2, "x", "renew", "x", 100, 700*ms, 701*ms, false, 0)
	op(3, "x", "release", "x", 100, 720*ms, 721*ms, false, 0)
	if pending {
		evs = append(evs, verify.Event{E: "call", Worker: "w0", Seq: 5, Proc: "z", Key: "k", Op: "acquire", Owner: "z", ReqID: "z-req", TTL: ttl, T: 50 * ms})
	}
	y := int64(yCall)
	op(4, "y", "acquire", "y", 0, y, y+ms, true, yToken)
	return &verify.History{Events: evs}, []Restart{{Killed: 100 * ms, Up: 600 * ms}}
}

// TestStateLosses: the model with the restarts' "lose" operations accepts
// what the Redis store promises after a restart that lost its state (the
// holder's renewal and release refused, the next grant only after the
// holder's lease would have expired, with a greater token) and still
// refuses a grant made earlier (no hold-back) or with a smaller token.
func TestStateLosses(t *testing.T) {
	for _, c := range []struct {
		name    string
		yCall   time.Duration
		yToken  uint64
		pending bool
		withOps bool
		want    string // Result.Checker()
	}{
		{"held back", 1100 * time.Millisecond, 200, false, true, "ok"},
		{"held back, an acquire pending", 1100 * time.Millisecond, 200, true, true, "ok"},
		{"held back, no loss modelled", 1100 * time.Millisecond, 200, false, false, "illegal"},
		{"granted during the old lease", 650 * time.Millisecond, 200, false, true, "illegal"},
		{"token not above", 1100 * time.Millisecond, 50, false, true, "illegal"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, restarts := lossHistory(c.yCall, c.yToken, c.pending)
			added := 0
			if c.withOps {
				h, added = StateLosses(h, restarts)
			}
			if c.withOps && added != 1 {
				t.Fatalf("StateLosses added %d operations; want 1 (one key, one restart)", added)
			}
			res := verify.Check(h, verify.CheckOptions{Timeout: 10 * time.Second})
			if got := res.Checker(); got != c.want {
				t.Fatalf("checker %q, want %q: %s", got, c.want, res)
			}
		})
	}
}

// TestRecoveryRenewalsRevivedEarlierGrant is R7's failure of the stop-38
// CI run, reduced: a is granted token 545 (TTL 2 s) at 0 ms and its
// release at 200 ms gets no answer; b asks at 280 ms and is granted token
// 572 only at 3,000 ms (it waited through a fault); the raft term changes
// at 2,200 ms, after a's lease expired but before etcd's lazy revoke
// removed it, and the new leader gives it a full TTL again; c is told at
// 2,500 ms that a holds 545. The recovery renewal must be a's, not only
// that of the highest token whose acquire was called before the change
// (b's, granted after it). With b granted before the change, or without
// the change, c's answer stays illegal.
func TestRecoveryRenewalsRevivedEarlierGrant(t *testing.T) {
	ms := int64(time.Millisecond)
	ttl := int64(2 * time.Second)
	history := func(bReturn int64) *verify.History {
		var evs []verify.Event
		seq := int64(0)
		op := func(proc, kind, owner string, tok uint64, call, ret int64, ok bool, out uint64, holder string) {
			seq++
			evs = append(evs, verify.Event{E: "call", Worker: proc, Seq: seq, Proc: proc, Key: "k", Op: kind, Owner: owner, ReqID: owner + "-req", Token: tok, TTL: ttl, T: call})
			if ret >= 0 {
				evs = append(evs, verify.Event{E: "ret", Worker: proc, Seq: seq, Proc: proc, Key: "k", Op: kind, OK: ok, Out: out, Holder: holder, T: ret})
			}
		}
		op("a", "acquire", "a", 0, 0, 1*ms, true, 545, "")
		op("a", "release", "a", 545, 200*ms, -1, false, 0, "") // no answer
		op("b", "acquire", "b", 0, 280*ms, bReturn, true, 572, "")
		op("c", "acquire", "c", 0, 2500*ms, 2501*ms, false, 545, "a")
		return &verify.History{Events: evs}
	}
	change := []Restart{{Killed: 2200 * ms, Up: 2200 * ms}}
	for _, c := range []struct {
		name    string
		bReturn int64
		change  bool
		want    string
	}{
		{"b granted after the change", 3000 * ms, true, "ok"},
		{"no change of leader", 3000 * ms, false, "illegal"},
		{"b granted before the change", 2100 * ms, true, "illegal"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := history(c.bReturn)
			if c.change {
				h, _ = RecoveryRenewals(h, change)
			}
			res := verify.Check(h, verify.CheckOptions{Timeout: 10 * time.Second})
			if got := res.Checker(); got != c.want {
				t.Fatalf("checker %q, want %q: %s", got, c.want, res)
			}
		})
	}
}
