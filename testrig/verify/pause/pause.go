// Package pause holds suite R4 of the verification plan: a lease holder (a
// worker process) is stopped with SIGSTOP in the middle of its critical
// section for 1.5–3 × its TTL and then continued, the way a long garbage
// collection pause, a swapped-out process or a suspended VM stops a client.
// The tests (in the _test files) run it with the fencing oracle and careful
// workers, with the fencing oracle and naive workers (fencing alone must
// hold), and with the unfenced control, which must be caught.
//
// This file holds the fault injector, Pauser, which other suites may reuse:
// set its OnRead as the oracle's OnRead hook and it pauses readers — which
// hold their lease at that moment — on a seeded random schedule.
package pause

import (
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/testrig/verify"
)

// Config says how a Pauser pauses.
type Config struct {
	// Budget is the number of pauses to make in all.
	Budget int
	// MaxPaused is how many processes may be paused at once (default 1);
	// keep it below the number of workers so that others take over.
	MaxPaused int
	// Chance is the probability that a read by a process that is not
	// paused starts a pause, while budget and a free slot remain
	// (default 0.5).
	Chance float64
	// Min and Max bound each pause's length, drawn uniformly.
	Min, Max time.Duration
	// Seed seeds the choices (0: random).
	Seed uint64
}

// Pause is one pause made.
type Pause struct {
	Pid      int
	Key      string        // the lease the process held (the key it read)
	Length   time.Duration // drawn length
	From, To int64         // verify.Mono at SIGSTOP and at SIGCONT (0 while paused)
}

// Pauser stops oracle readers with SIGSTOP and continues them later. Its
// methods are safe for concurrent use.
type Pauser struct {
	cfg Config

	mu       sync.Mutex
	rng      *rand.Rand
	pauses   []Pause
	open     map[int]int // pid → index in pauses, while paused
	timers   map[int]*time.Timer
	closed   bool
	done     chan struct{}
	doneOnce sync.Once
}

// New returns a Pauser. It pauses nothing until its OnRead is called.
func New(cfg Config) *Pauser {
	if cfg.MaxPaused <= 0 {
		cfg.MaxPaused = 1
	}
	if cfg.Chance <= 0 {
		cfg.Chance = 0.5
	}
	if cfg.Max < cfg.Min {
		cfg.Max = cfg.Min
	}
	if cfg.Seed == 0 {
		cfg.Seed = rand.Uint64()
	}
	p := &Pauser{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x9a05e)),
		open: map[int]int{}, timers: map[int]*time.Timer{}, done: make(chan struct{})}
	if cfg.Budget <= 0 {
		p.finish()
	}
	return p
}

// OnRead is the oracle's hook (verify.Oracle.OnRead): the reader pid holds
// the lease on key right now. It may stop pid there; the read is answered
// when pid continues.
func (p *Pauser) OnRead(pid int, key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.pauses) >= p.cfg.Budget || len(p.open) >= p.cfg.MaxPaused {
		return
	}
	if _, paused := p.open[pid]; paused {
		return // another of its goroutines' reads was already in flight
	}
	if p.rng.Float64() >= p.cfg.Chance {
		return
	}
	d := p.cfg.Min
	if span := p.cfg.Max - p.cfg.Min; span > 0 {
		d += time.Duration(p.rng.Int64N(int64(span) + 1))
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return
	}
	p.open[pid] = len(p.pauses)
	p.pauses = append(p.pauses, Pause{Pid: pid, Key: key, Length: d, From: verify.Mono()})
	p.timers[pid] = time.AfterFunc(d, func() { p.resume(pid) })
}

// resume continues pid if it is paused.
func (p *Pauser) resume(pid int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resumeLocked(pid)
	if len(p.open) == 0 && (p.closed || len(p.pauses) >= p.cfg.Budget) {
		p.finish()
	}
}

func (p *Pauser) resumeLocked(pid int) {
	i, ok := p.open[pid]
	if !ok {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGCONT)
	p.pauses[i].To = verify.Mono()
	delete(p.open, pid)
	if t := p.timers[pid]; t != nil {
		t.Stop()
	}
	delete(p.timers, pid)
}

func (p *Pauser) finish() { p.doneOnce.Do(func() { close(p.done) }) }

// Done is closed once the budget is spent and every paused process has
// been continued (or after Close).
func (p *Pauser) Done() <-chan struct{} { return p.done }

// Wait waits for Done at most timeout and reports whether it closed.
func (p *Pauser) Wait(timeout time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// Close stops pausing and continues every paused process now.
func (p *Pauser) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for pid := range p.open {
		p.resumeLocked(pid)
	}
	p.finish()
}

// Paused is the number of processes paused right now.
func (p *Pauser) Paused() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.open)
}

// Pauses returns the pauses made so far, in order.
func (p *Pauser) Pauses() []Pause {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Pause(nil), p.pauses...)
}

// Takeovers counts the pauses during which another worker was granted the
// paused holder's lease — the situation the suite is about. worker maps a
// paused pid to its worker id in the history ("w3"); see WorkerIDs.
func Takeovers(h *verify.History, pauses []Pause, worker map[int]string) int {
	type grant struct {
		worker string
		t      int64
	}
	calls := map[string]verify.Event{}
	grants := map[string][]grant{}
	for _, ev := range h.Events {
		switch {
		case ev.E == "call" && ev.Op == "acquire":
			calls[ev.Worker+"/"+strconv.FormatInt(ev.Seq, 10)] = ev
		case ev.E == "ret" && ev.Op == "acquire" && ev.OK:
			if c, ok := calls[ev.Worker+"/"+strconv.FormatInt(ev.Seq, 10)]; ok {
				grants[c.Key] = append(grants[c.Key], grant{ev.Worker, ev.T})
			}
		}
	}
	for _, gs := range grants {
		sort.Slice(gs, func(i, j int) bool { return gs[i].t < gs[j].t })
	}
	n := 0
	for _, ps := range pauses {
		to := ps.To
		if to == 0 {
			continue
		}
		gs := grants[ps.Key]
		i := sort.Search(len(gs), func(i int) bool { return gs[i].t > ps.From })
		for ; i < len(gs) && gs[i].t < to; i++ {
			if gs[i].worker != worker[ps.Pid] {
				n++
				break
			}
		}
	}
	return n
}

// WorkerIDs maps every worker's pid in g to its id in the history.
func WorkerIDs(g *verify.Group) map[int]string {
	m := map[int]string{}
	for i := 0; i < g.Len(); i++ {
		m[g.Pid(i)] = "w" + strconv.Itoa(i)
	}
	return m
}
