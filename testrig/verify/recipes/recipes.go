// Package recipes holds suite R9 of the verification plan: leader
// elections (leasehold.Election) and semaphores of N = 3 permits
// (leasehold.Semaphore), run by worker processes in the harness's
// "election" and "semaphore" modes, while the store's engine (or the lease
// server) is SIGKILLed and restarted (as in R3), SIGSTOPped and continued
// (as in R5), and a leader or permit holder is SIGSTOPped for longer than
// its TTL in the middle of its work (as in R4).
//
// Pass: at most one leader per term, terms increasing over time, never two
// leaders at once, never more than N permit holders at once (nor two
// holders of one permit), every lease's history linearizable (porcupine),
// no token regression, and no lost or stale write at the fenced oracle.
// The tests are in the _test files; this file has the checks of terms and
// permits and the holder pauser, which other suites may reuse.
package recipes

import (
	"fmt"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/testrig/verify"
	"github.com/leasehold/leasehold/testrig/verify/pause"
)

// Terms is what CheckTerms found in an election history.
type Terms struct {
	Leaderships int // leadership intervals ("cs" events)
	Terms       int // distinct (election, term) pairs
	// Shared counts terms claimed by more than one leader identity.
	Shared int
	// Regressions counts leaderships whose term is not above the term of
	// a leadership of the same election that had ended before it began.
	Regressions int
	First       string
}

// Violations is the number of violations found.
func (r Terms) Violations() int { return r.Shared + r.Regressions }

func (r Terms) String() string {
	s := fmt.Sprintf("%d leaderships, %d terms; %d terms with two leaders, %d term regressions", r.Leaderships, r.Terms, r.Shared, r.Regressions)
	if r.First != "" {
		s += "\nfirst violation: " + r.First
	}
	return s
}

// leader is a leadership's identity: the owner the worker mode records, or
// the logical process.
func leader(ev verify.Event) string {
	if ev.Owner != "" {
		return ev.Owner
	}
	return ev.Worker + "/" + ev.Proc
}

// CheckTerms checks the leaderships of an election history (the "cs"
// events of the "election" worker mode: Key the election, Token the term):
// at most one leader per term, and terms increasing over time — a
// leadership never has a term at or below that of a leadership of the same
// election that ended before it began. (That two leaderships never overlap
// is verify.Check's overlap count with Permits 1.)
func CheckTerms(h *verify.History) Terms {
	var r Terms
	note := func(format string, args ...any) {
		if r.First == "" {
			r.First = fmt.Sprintf(format, args...)
		}
	}
	per := map[string][]verify.Event{}
	for _, ev := range h.Events {
		if ev.E == "cs" {
			per[ev.Key] = append(per[ev.Key], ev)
			r.Leaderships++
		}
	}
	names := make([]string, 0, len(per))
	for k := range per {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		evs := per[name]
		owners := map[uint64]map[string]bool{}
		for _, ev := range evs {
			if owners[ev.Token] == nil {
				owners[ev.Token] = map[string]bool{}
			}
			owners[ev.Token][leader(ev)] = true
		}
		r.Terms += len(owners)
		terms := make([]uint64, 0, len(owners))
		for term := range owners {
			terms = append(terms, term)
		}
		sort.Slice(terms, func(i, j int) bool { return terms[i] < terms[j] })
		for _, term := range terms {
			if len(owners[term]) > 1 {
				r.Shared++
				ids := make([]string, 0, len(owners[term]))
				for id := range owners[term] {
					ids = append(ids, id)
				}
				sort.Strings(ids)
				note("%s: term %d led by %v", name, term, ids)
			}
		}
		// Leaderships that held for a while, by start and by end.
		var valid []verify.Event
		for _, ev := range evs {
			if ev.To > ev.From {
				valid = append(valid, ev)
			}
		}
		// top: the ended leadership with the highest term so far.
		verify.AfterEnded(valid, func(ev, top verify.Event) {
			if top.Token != 0 && ev.Token <= top.Token {
				r.Regressions++
				note("%s: %s led with term %d from %.3f s, after %s had led with term %d until %.3f s",
					name, leader(ev), ev.Token, float64(ev.From)/1e9, leader(top), top.Token, float64(top.To)/1e9)
			}
		})
	}
	return r
}

// Permits is what CheckPermits found in a semaphore history.
type Permits struct {
	Holds int // permits held ("cs" events)
	Used  int // distinct permits (semaphore, index) held
	// MaxAtOnce is the most permits of one semaphore held at once.
	MaxAtOnce int
	// OutOfRange counts holds of a permit whose index is not in [0, N)
	// (or whose lease name is not a permit of the semaphore).
	OutOfRange int
	// Overlaps counts moments at which one permit had two holders.
	Overlaps int
	First    string
}

// Violations is the number of violations found.
func (r Permits) Violations() int { return r.OutOfRange + r.Overlaps }

func (r Permits) String() string {
	s := fmt.Sprintf("%d permits held, %d distinct permits used, at most %d at once; %d out of range, %d overlaps on one permit",
		r.Holds, r.Used, r.MaxAtOnce, r.OutOfRange, r.Overlaps)
	if r.First != "" {
		s += "\nfirst violation: " + r.First
	}
	return s
}

// CheckPermits checks a semaphore history (the "cs" events of the
// "semaphore" worker mode: Key the semaphore, Msg the permit's lease name)
// permit by permit: every permit held is one of the semaphore's n, and no
// permit has two holders at once. (That at most n permits are held at once
// is verify.Check's overlap count with Permits n.)
func CheckPermits(h *verify.History, n int) Permits {
	var r Permits
	used := map[string]bool{}
	var perPermit []verify.Event
	type edge struct {
		t     int64
		delta int
	}
	edges := map[string][]edge{}
	for _, ev := range h.Events {
		if ev.E != "cs" {
			continue
		}
		r.Holds++
		if ev.To > ev.From {
			edges[ev.Key] = append(edges[ev.Key], edge{ev.From, 1}, edge{ev.To, -1})
		}
		used[ev.Msg] = true
		if i, ok := leasehold.PermitIndex(ev.Key, ev.Msg); !ok || i >= n {
			r.OutOfRange++
			if r.First == "" {
				r.First = fmt.Sprintf("%s held %q, not one of the %d permits of %s", leader(ev), ev.Msg, n, ev.Key)
			}
		}
		ev.Key = ev.Msg
		perPermit = append(perPermit, ev)
	}
	r.Used = len(used)
	for _, es := range edges {
		sort.Slice(es, func(i, j int) bool {
			if es[i].t != es[j].t {
				return es[i].t < es[j].t
			}
			return es[i].delta < es[j].delta
		})
		held := 0
		for _, e := range es {
			held += e.delta
			r.MaxAtOnce = max(r.MaxAtOnce, held)
		}
	}
	res := verify.Check(&verify.History{Events: perPermit}, verify.CheckOptions{Permits: 1, NoLinearizability: true})
	r.Overlaps = res.Overlaps
	if r.First == "" && res.FirstBad != "" {
		r.First = res.FirstBad
	}
	return r
}

// HolderPauser pauses lease holders: set its OnRead as the oracle's OnRead
// hook, tell it which worker processes belong to which group (Set), and
// Arm it for a group; the next oracle read by a process of that group — a
// holder in its critical section, a leader doing its work — stops that
// process with SIGSTOP, and it is continued after the armed length. Its
// methods are safe for concurrent use.
type HolderPauser struct {
	mu     sync.Mutex
	groups map[int]string           // pid → group
	armed  map[string]time.Duration // group → pause length
	pauses map[string][]pause.Pause
	open   map[int]*time.Timer
	wg     sync.WaitGroup
	closed bool
}

// NewHolderPauser returns a HolderPauser with nothing armed.
func NewHolderPauser() *HolderPauser {
	return &HolderPauser{groups: map[int]string{}, armed: map[string]time.Duration{},
		pauses: map[string][]pause.Pause{}, open: map[int]*time.Timer{}}
}

// Set says that the processes pids belong to group (replacing what was
// said of group before).
func (p *HolderPauser) Set(group string, pids ...int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for pid, g := range p.groups {
		if g == group {
			delete(p.groups, pid)
		}
	}
	for _, pid := range pids {
		p.groups[pid] = group
	}
}

// Arm makes the next oracle read by a process of group pause it for d.
func (p *HolderPauser) Arm(group string, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.armed[group] = d
	}
}

// Armed reports whether group's pause is still waiting for a reader.
func (p *HolderPauser) Armed(group string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.armed[group]
	return ok
}

// Disarm cancels group's pause if no reader has come yet.
func (p *HolderPauser) Disarm(group string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.armed, group)
}

// OnRead is the oracle's hook.
func (p *HolderPauser) OnRead(pid int, key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	g, ok := p.groups[pid]
	if !ok || p.closed {
		return
	}
	d, ok := p.armed[g]
	if !ok || p.open[pid] != nil {
		return
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return
	}
	delete(p.armed, g)
	i := len(p.pauses[g])
	p.pauses[g] = append(p.pauses[g], pause.Pause{Pid: pid, Key: key, Length: d, From: verify.Mono()})
	p.wg.Add(1)
	p.open[pid] = time.AfterFunc(d, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.resumeLocked(g, i, pid)
	})
}

func (p *HolderPauser) resumeLocked(g string, i, pid int) {
	if p.open[pid] == nil {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGCONT)
	p.pauses[g][i].To = verify.Mono()
	p.open[pid].Stop()
	delete(p.open, pid)
	p.wg.Done()
}

// Wait waits until every paused process has been continued.
func (p *HolderPauser) Wait() { p.wg.Wait() }

// Close disarms everything and continues every paused process now.
func (p *HolderPauser) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	clear(p.armed)
	for g, ps := range p.pauses {
		for i, ps := range ps {
			if ps.To == 0 {
				p.resumeLocked(g, i, ps.Pid)
			}
		}
	}
}

// Pauses returns the pauses made in group, in order.
func (p *HolderPauser) Pauses(group string) []pause.Pause {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]pause.Pause(nil), p.pauses[group]...)
}

// EtcdUnconfirmedGrants returns a copy of h in which every acquire without
// a definite answer is an "unheard" one (storetest's model: a grant that
// may end at any moment after it was made), and the number of acquires
// changed.
//
// The etcd store ends such a grant itself: when the acquire's Txn failed
// with an unknown outcome, or succeeded while the refresh of its spare
// etcd lease failed, it revokes that etcd lease before it answers, or in
// the background if etcd cannot be reached within unheardWait
// (endUnheard, etcd/ops.go); and a grant on a spare whose refresh did not
// land stands on the unrefreshed lease, which may expire half an etcd TTL
// after the call (etcd/spares.go). Nobody holds such a grant: the caller
// was told of an error, and a retry with its request id refreshes it
// before handing it back. But the model takes an indeterminate acquire
// that took effect as a lease from its call for its TTL, and would call a
// takeover after the revoke illegal (CI run 52's R7 row did, 0.74 s into
// a 2 s lease: TestEtcdUnheardGrantEndsEarly). Grants with a definite
// answer are judged as before.
func EtcdUnconfirmedGrants(h *verify.History) (*verify.History, int) {
	type id struct {
		w   string
		seq int64
	}
	definite := map[id]bool{}
	for _, ev := range h.Events {
		if ev.E == "ret" && !ev.Unk {
			definite[id{ev.Worker, ev.Seq}] = true
		}
	}
	out := &verify.History{Events: append([]verify.Event(nil), h.Events...)}
	n := 0
	for i, ev := range out.Events {
		if ev.E != "call" || ev.Op != "acquire" || definite[id{ev.Worker, ev.Seq}] {
			continue
		}
		out.Events[i].Op = "unheard"
		n++
	}
	return out, n
}
