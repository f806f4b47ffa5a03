package failover

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/testrig/verify"
	"github.com/leasehold/leasehold/testrig/verify/crash"
)

// dropLostReleaseRefusals returns h without the acquire refusals that name
// a grant whose release a failover lost, and how many it left out.
//
// A release acknowledged by the old primary during a failover (returned
// after the fault began, called before the promotion) may be missing on
// the promoted replica, which then still has the released grant and
// answers "held by" its holder and token until that grant's record
// expires — at the latest ttl after the fault began (the replica has
// nothing written after that). The model's "lose" (crash.StateLosses)
// may lose a grant, its fence or its renewals, but does not bring a
// released grant back, and calls such a refusal illegal (R18
// redis-sentinel-election, lag-kill: a resigned leader's campaign was
// answered "held by" itself, with its old term, right after the
// promotion). A refusal changes no state, and the checks of safety —
// overlaps, tokens, the oracle — do not read it: leaving it out only stops
// the model from judging it. Only refusals whose call came after the
// release returned and before the fault's start plus ttl (and a second) are
// left out; the grants, renewals and releases all stay.
func dropLostReleaseRefusals(h *verify.History, restarts []crash.Restart, ttl time.Duration) (*verify.History, int) {
	type grant struct {
		key, owner string
		token      uint64
	}
	// released: for each grant whose release a failover may have lost, the
	// release's return and the last moment the promoted replica may still
	// answer with the grant.
	type window struct{ from, until int64 }
	calls := map[opID]verify.Event{}
	released := map[grant]window{}
	for _, ev := range h.Events {
		k := opID{ev.Worker, ev.Seq}
		switch {
		case ev.E == "call":
			calls[k] = ev
		case ev.E == "ret" && ev.Op == "release" && ev.OK && !ev.Unk:
			c := calls[k]
			for _, r := range restarts {
				if ev.T > r.Killed && c.T < r.Up {
					released[grant{ev.Key, c.Owner, c.Token}] = window{ev.T, r.Killed + int64(ttl+time.Second)}
				}
			}
		}
	}
	drop := map[opID]bool{}
	for _, ev := range h.Events {
		if ev.E != "ret" || ev.Op != "acquire" || ev.OK || ev.Unk || ev.Holder == "" || ev.Out == 0 {
			continue
		}
		k := opID{ev.Worker, ev.Seq}
		w, ok := released[grant{ev.Key, ev.Holder, ev.Out}]
		if c := calls[k]; ok && c.T > w.from && c.T < w.until {
			drop[k] = true
		}
	}
	return withoutOps(h, drop), len(drop)
}

// opID names a recorded operation: its call and ret events.
type opID struct {
	worker string
	seq    int64
}

// withoutOps returns h without the call and ret events of the operations
// in drop.
func withoutOps(h *verify.History, drop map[opID]bool) *verify.History {
	out := &verify.History{}
	for _, ev := range h.Events {
		if (ev.E == "call" || ev.E == "ret") && drop[opID{ev.Worker, ev.Seq}] {
			continue
		}
		out.Events = append(out.Events, ev)
	}
	return out
}

// TestDropLostReleaseRefusals replays the shape of R18
// redis-sentinel-election's illegal verdict (times from that run, in ms
// from the fault's start): a leader's grant, its renewal and its release
// acknowledged by the old primary during a lag-kill, then its next
// campaign answered "held by" itself with the released term by the
// promoted replica. The model calls that illegal as recorded; without the
// refusal the history is legal, and the grants, renewals and releases
// stay. A refusal that names a grant released before the fault began, or
// comes after the replica's copy of the grant must have expired, is kept
// and still illegal.
func TestDropLostReleaseRefusals(t *testing.T) {
	const ms = int64(time.Millisecond)
	base := 1000 * int64(time.Second)
	at := func(m float64) int64 { return base + int64(m*float64(ms)) }
	ttl := 5 * time.Second
	restarts := []crash.Restart{{Killed: at(0), Up: at(3728)}}
	history := func(release, refusal float64) *verify.History {
		return &verify.History{Events: []verify.Event{
			{E: "call", Worker: "w2", Seq: 1, Proc: "w2-2.0", Key: "e", Op: "acquire", Owner: "w2-2", ReqID: "r1", TTL: int64(ttl), T: at(-601)},
			{E: "ret", Worker: "w2", Seq: 1, Proc: "w2-2.0", Key: "e", Op: "acquire", OK: true, Out: 533, T: at(-600)},
			{E: "call", Worker: "w2", Seq: 2, Proc: "w2-2.0", Key: "e", Op: "renew", Owner: "w2-2", Token: 533, TTL: int64(ttl), T: at(release - 332)},
			{E: "ret", Worker: "w2", Seq: 2, Proc: "w2-2.0", Key: "e", Op: "renew", OK: true, T: at(release - 331)},
			{E: "call", Worker: "w2", Seq: 3, Proc: "w2-2.0", Key: "e", Op: "release", Owner: "w2-2", Token: 533, T: at(release)},
			{E: "ret", Worker: "w2", Seq: 3, Proc: "w2-2.0", Key: "e", Op: "release", OK: true, T: at(release + 0.2)},
			{E: "call", Worker: "w2", Seq: 4, Proc: "w2-2.0", Key: "e", Op: "acquire", Owner: "w2-2", ReqID: "r2", TTL: int64(ttl), T: at(refusal)},
			{E: "ret", Worker: "w2", Seq: 4, Proc: "w2-2.0", Key: "e", Op: "acquire", Out: 533, Holder: "w2-2", T: at(refusal + 1416)},
		}}
	}
	check := func(h *verify.History) verify.Result {
		h, _ = crash.StateLosses(h, restarts)
		return verify.Check(h, verify.CheckOptions{})
	}
	for _, c := range []struct {
		name             string
		release, refusal float64
		dropped          int
	}{
		{"release lost by the promotion", 1400, 2400, 1},
		{"release before the fault", -300, 2400, 0},
		{"refusal after the replica's copy expired", 1400, 6100, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := history(c.release, c.refusal)
			if r := check(h); r.Passed() {
				t.Fatalf("as recorded: %s; want illegal", r)
			}
			out, n := dropLostReleaseRefusals(h, restarts, ttl)
			if n != c.dropped || len(out.Events) != len(h.Events)-2*n {
				t.Fatalf("%d refusals left out (%d of %d events kept), want %d", n, len(out.Events), len(h.Events), c.dropped)
			}
			if r := check(out); r.Passed() != (n > 0) {
				t.Fatalf("with %d refusals left out: %s", n, r)
			}
		})
	}
}
