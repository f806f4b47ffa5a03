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
