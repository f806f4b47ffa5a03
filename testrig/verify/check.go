package verify

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/leasehold/leasehold/storetest"
)

// History is the events of a run, in the order the harness received them.
type History struct {
	Events []Event
}

// Result is what the checkers found in a history.
type Result struct {
	Ops           int // lease operations recorded
	Grants        int // successful acquires
	Indeterminate int // operations without a definite answer
	Keys          int // lease names checked by porcupine
	Ok            int // keys found linearizable
	Illegal       int // keys proved not linearizable
	Undecided     int // keys the checker could not decide in time (never a pass)
	// Overlaps: pairs of critical sections on one key (or more than
	// Permits at once for a semaphore) that both believed they held it.
	Overlaps int
	// TokenRegressions: grants whose token was not above a token granted
	// for the key before they were asked.
	TokenRegressions int
	CS               int // critical sections recorded
	FirstBad         string
	IllegalKeys      []string // the keys porcupine found illegal, sorted
}

// Violations counts the safety violations found (Undecided is not one,
// but it is not a pass either: see Passed).
func (r Result) Violations() int { return r.Illegal + r.Overlaps + r.TokenRegressions }

// Passed reports whether every key was checked and nothing was found.
func (r Result) Passed() bool {
	return r.Keys > 0 && r.Ok == r.Keys && r.Violations() == 0
}

// Checker is the checker column of the report.
func (r Result) Checker() string {
	switch {
	case r.Illegal > 0:
		return "illegal"
	case r.Undecided > 0 || r.Keys == 0:
		return "unknown"
	case r.Violations() > 0:
		return "violations"
	}
	return "ok"
}

func (r Result) String() string {
	s := fmt.Sprintf("%d ops (%d grants, %d indeterminate), %d critical sections; porcupine: %d/%d keys ok, %d illegal, %d undecided; %d overlaps, %d token regressions",
		r.Ops, r.Grants, r.Indeterminate, r.CS, r.Ok, r.Keys, r.Illegal, r.Undecided, r.Overlaps, r.TokenRegressions)
	if r.FirstBad != "" {
		s += "\nfirst violation: " + r.FirstBad
	}
	return s
}

// CheckOptions tune Check.
type CheckOptions struct {
	Permits int           // critical sections allowed at once per key (default 1)
	Timeout time.Duration // porcupine's time per key (default 2 minutes)
	// NoLinearizability skips porcupine (for histories whose operations
	// are not all recorded, such as a semaphore's slot leases).
	NoLinearizability bool
}

// LeaseOps pairs the history's calls and returns into lease operations per
// key. A call without a return (its worker was killed) is indeterminate.
func (h *History) LeaseOps() map[string][]storetest.LeaseOp {
	type id struct {
		w   string
		seq int64
	}
	rets := map[id]Event{}
	for _, ev := range h.Events {
		if ev.E == "ret" {
			rets[id{ev.Worker, ev.Seq}] = ev
		}
	}
	clients := map[string]int{}
	out := map[string][]storetest.LeaseOp{}
	for _, ev := range h.Events {
		if ev.E != "call" {
			continue
		}
		p := ev.Worker + "/" + ev.Proc
		cid, ok := clients[p]
		if !ok {
			cid = len(clients)
			clients[p] = cid
		}
		op := storetest.LeaseOp{Client: cid, Kind: ev.Op, Owner: ev.Owner, RequestID: ev.ReqID, Token: ev.Token,
			TTL: time.Duration(ev.TTL), Call: ev.T}
		if r, ok := rets[id{ev.Worker, ev.Seq}]; ok && !r.Unk {
			op.Return, op.OK, op.OutToken, op.Holder = r.T, r.OK, r.Out, r.Holder
			if r.Undone {
				op.Kind, op.OK = "undone", false
			}
		} else {
			op.Unknown = true
		}
		out[ev.Key] = append(out[ev.Key], op)
	}
	return out
}

// Check runs every checker on the history.
func Check(h *History, opt CheckOptions) Result {
	if opt.Permits == 0 {
		opt.Permits = 1
	}
	if opt.Timeout == 0 {
		opt.Timeout = 2 * time.Minute
	}
	var res Result
	perKey := h.LeaseOps()
	note := func(s string) {
		if res.FirstBad == "" {
			res.FirstBad = s
		}
	}
	keys := make([]string, 0, len(perKey))
	for k, ops := range perKey {
		keys = append(keys, k)
		res.Ops += len(ops)
		for _, op := range ops {
			if op.Unknown {
				res.Indeterminate++
			}
			if op.Kind == "acquire" && op.OK {
				res.Grants++
			}
		}
		if n, first := tokenRegressions(ops); n > 0 {
			res.TokenRegressions += n
			note(k + ": " + first)
		}
	}
	sort.Strings(keys)
	if !opt.NoLinearizability {
		var mu sync.Mutex
		sem := make(chan struct{}, 2)
		var wg sync.WaitGroup
		for _, k := range keys {
			wg.Add(1)
			sem <- struct{}{}
			go func(k string) {
				defer wg.Done()
				defer func() { <-sem }()
				ops := make([]porcupine.Operation, 0, len(perKey[k]))
				for _, op := range perKey[k] {
					pop, err := op.Operation()
					if err != nil {
						continue
					}
					ops = append(ops, pop)
				}
				r := porcupine.CheckOperationsTimeout(storetest.LeaseModel(), ops, opt.Timeout)
				mu.Lock()
				defer mu.Unlock()
				res.Keys++
				switch r {
				case porcupine.Ok:
					res.Ok++
				case porcupine.Illegal:
					res.Illegal++
					res.IllegalKeys = append(res.IllegalKeys, k)
					note(storetest.DescribeHistory(k, shortestIllegal(perKey[k], opt.Timeout)))
				default:
					res.Undecided++
				}
			}(k)
		}
		wg.Wait()
		sort.Strings(res.IllegalKeys)
	}
	n, first := overlaps(h.Events, opt.Permits)
	res.Overlaps = n
	if first != "" {
		note(first)
	}
	for _, ev := range h.Events {
		if ev.E == "cs" {
			res.CS++
		}
	}
	return res
}

// DescribeKey renders every lease operation of key in h, by call time, as
// the checker sees them: the whole of a history a failure's window comes
// from.
func (h *History) DescribeKey(key string) string {
	ops := append([]storetest.LeaseOp(nil), h.LeaseOps()[key]...)
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	pops := make([]porcupine.Operation, 0, len(ops))
	for _, op := range ops {
		if pop, err := op.Operation(); err == nil {
			pops = append(pops, pop)
		}
	}
	return storetest.DescribeHistory(key, pops)
}

// shortestIllegal returns the operations around the violation in an
// illegal history: the last ones (by call time) of the shortest prefix the
// checker still finds illegal, with every earlier operation still in
// flight when the window opens. A prefix is cut at a call: the operations
// called after it are left out, and those called before it but answered
// after it are taken as unanswered (they may or may not have taken
// effect), because what they were told may depend on an operation left
// out. Cutting without that made a legal answer look illegal: an acquire
// told "held by" a grant whose request was called after it. So a prefix
// found illegal is a violation of the whole history, and the window shows
// the answers as they were recorded.
func shortestIllegal(lops []storetest.LeaseOp, timeout time.Duration) []porcupine.Operation {
	lops = append([]storetest.LeaseOp(nil), lops...)
	sort.SliceStable(lops, func(i, j int) bool { return lops[i].Call < lops[j].Call })
	convert := func(ops []storetest.LeaseOp) []porcupine.Operation {
		out := make([]porcupine.Operation, 0, len(ops))
		for _, op := range ops {
			if pop, err := op.Operation(); err == nil {
				out = append(out, pop)
			}
		}
		return out
	}
	illegal := func(n int) bool { // lops[:n], cut at the last one's call
		cut := make([]storetest.LeaseOp, n)
		copy(cut, lops[:n])
		if n < len(lops) {
			at := lops[n-1].Call
			for i := range cut {
				if !cut[i].Unknown && cut[i].Return > at {
					cut[i].Unknown = true
				}
			}
		}
		return porcupine.CheckOperationsTimeout(storetest.LeaseModel(), convert(cut), timeout) == porcupine.Illegal
	}
	lo, hi := 1, len(lops) // lops[:hi], cut so, is illegal
	for lo < hi {
		mid := (lo + hi) / 2
		if illegal(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	const show = 30
	from := max(0, hi-show)
	var window []storetest.LeaseOp
	for _, op := range lops[:from] {
		if op.Unknown || op.Return > lops[from].Call {
			window = append(window, op) // still in flight when the window opens
		}
	}
	return convert(append(window, lops[from:hi]...))
}

// tokenRegressions counts grants whose token is not above every token
// granted (to someone else's request) before the grant was asked for.
func tokenRegressions(ops []storetest.LeaseOp) (int, string) {
	var grants []storetest.LeaseOp
	for _, op := range ops {
		if op.Kind == "acquire" && op.OK && !op.Unknown {
			grants = append(grants, op)
		}
	}
	byRet := append([]storetest.LeaseOp(nil), grants...)
	sort.Slice(byRet, func(i, j int) bool { return byRet[i].Return < byRet[j].Return })
	sort.Slice(grants, func(i, j int) bool { return grants[i].Call < grants[j].Call })
	var max storetest.LeaseOp
	j, n, first := 0, 0, ""
	for _, g := range grants {
		for j < len(byRet) && byRet[j].Return < g.Call {
			if byRet[j].OutToken > max.OutToken {
				max = byRet[j]
			}
			j++
		}
		if g.OutToken > max.OutToken {
			continue
		}
		if g.OutToken == max.OutToken && g.Owner == max.Owner && g.RequestID == max.RequestID {
			continue // a retried acquire gets its own token back
		}
		n++
		if first == "" {
			first = fmt.Sprintf("%s was granted token %d after %s had been granted token %d", g.Owner, g.OutToken, max.Owner, max.OutToken)
		}
	}
	return n, first
}

// overlaps counts moments at which more than permits critical sections of
// one key were believed held at once.
func overlaps(evs []Event, permits int) (int, string) {
	type edge struct {
		t     int64
		delta int
		ev    Event
	}
	perKey := map[string][]edge{}
	for _, ev := range evs {
		if ev.E != "cs" || ev.To <= ev.From {
			continue
		}
		perKey[ev.Key] = append(perKey[ev.Key], edge{ev.From, +1, ev}, edge{ev.To, -1, ev})
	}
	n, first := 0, ""
	for key, edges := range perKey {
		sort.Slice(edges, func(i, j int) bool {
			if edges[i].t != edges[j].t {
				return edges[i].t < edges[j].t
			}
			return edges[i].delta < edges[j].delta // ends before starts at the same instant
		})
		open := map[string]Event{}
		for _, e := range edges {
			id := fmt.Sprintf("%s/%s/%d/%d", e.ev.Worker, e.ev.Proc, e.ev.Token, e.ev.From)
			if e.delta < 0 {
				delete(open, id)
				continue
			}
			open[id] = e.ev
			if len(open) > permits {
				n++
				if first == "" {
					first = fmt.Sprintf("%s: %d holders at once:", key, len(open))
					for _, o := range open {
						first += fmt.Sprintf(" [%s token %d %.3f–%.3f s]", o.Proc, o.Token, float64(o.From)/1e9, float64(o.To)/1e9)
					}
				}
			}
		}
	}
	return n, first
}

// AfterEnded calls f for each section of cs in order of its start (From)
// with top, the section of the highest Token among those that had ended
// (To) before it began (the zero Event if none): a token-order check
// compares the two. cs itself is not reordered.
func AfterEnded(cs []Event, f func(ev, top Event)) {
	byFrom := append([]Event(nil), cs...)
	sort.Slice(byFrom, func(i, j int) bool { return byFrom[i].From < byFrom[j].From })
	byTo := append([]Event(nil), cs...)
	sort.Slice(byTo, func(i, j int) bool { return byTo[i].To < byTo[j].To })
	var top Event
	j := 0
	for _, ev := range byFrom {
		for j < len(byTo) && byTo[j].To < ev.From {
			if byTo[j].Token > top.Token {
				top = byTo[j]
			}
			j++
		}
		f(ev, top)
	}
}
