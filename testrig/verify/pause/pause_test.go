package pause_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/testrig/verify"
	"github.com/leasehold/leasehold/testrig/verify/pause"
)

func TestMain(m *testing.M) { verify.Main(m) }

// store is a target prepared for pausing its clients.
type store struct {
	name string
	url  string
	ttl  time.Duration
	note string
}

// prepare starts a private instance of the named store and picks the TTL.
// TTLs are short so that thousands of pauses fit in minutes, except on
// etcd, whose leases have whole-second TTLs with a 2 s minimum: a shorter
// leasehold TTL would stay held on etcd for 2 s, longer than most pauses,
// and nobody would ever take over. DynamoDB waits out max_clock_skew
// (default 1 s) before a takeover; every worker runs on this machine's
// clock, so the suite sets it to 50 ms.
func prepare(t *testing.T, name string) store {
	tg := verify.StartTarget(t, name)
	s := store{name: name}
	s.url, s.ttl, s.note = tg.Fit(tg.URL, 500*time.Millisecond)
	return s
}

// run is one run: workers on fresh keys, an oracle, a Pauser.
type run struct {
	st        store
	prefix    string // key prefix, unique per run on a target
	fenced    bool
	naive     bool
	workers   int
	keys      int
	pauses    int
	maxPaused int
	seed      uint64
}

// outcome is what one or more runs found.
type outcome struct {
	res       verify.Result
	or        verify.OracleResult
	pauses    int
	takeovers int
	runs      int
	checkers  map[string]int
	first     string // first violation, with the run's logs
}

func (o *outcome) add(r outcome) {
	o.runs += r.runs
	o.pauses += r.pauses
	o.takeovers += r.takeovers
	o.res.Ops += r.res.Ops
	o.res.Grants += r.res.Grants
	o.res.Indeterminate += r.res.Indeterminate
	o.res.CS += r.res.CS
	o.res.Keys += r.res.Keys
	o.res.Ok += r.res.Ok
	o.res.Illegal += r.res.Illegal
	o.res.Undecided += r.res.Undecided
	o.res.Overlaps += r.res.Overlaps
	o.res.TokenRegressions += r.res.TokenRegressions
	o.or.Reads += r.or.Reads
	o.or.Writes += r.or.Writes
	o.or.Accepted += r.or.Accepted
	o.or.Rejected += r.or.Rejected
	o.or.LostUpdates += r.or.LostUpdates
	o.or.StaleAccepted += r.or.StaleAccepted
	o.or.AfterDeadline += r.or.AfterDeadline
	o.or.CounterMismatch += r.or.CounterMismatch
	if o.checkers == nil {
		o.checkers = map[string]int{}
	}
	for k, v := range r.checkers {
		o.checkers[k] += v
	}
	if o.first == "" {
		o.first = r.first
	}
}

// checker is the report's checker column: "ok" only if every run's was.
func (o *outcome) checker() string {
	for _, c := range []string{"illegal", "unknown", "violations"} {
		if o.checkers[c] > 0 {
			return c
		}
	}
	if o.checkers["ok"] == 0 {
		return "unknown"
	}
	return "ok"
}

const hold = 25 * time.Millisecond

// do runs r: the workers contend for r.keys keys, and r.pauses of their
// reads stop the reader for 1.5–3 × TTL. After the last pause it waits
// for the continued holders to finish their critical sections, stops the
// workers and checks the history and the oracle.
func do(t *testing.T, r run) outcome {
	t.Helper()
	ttl := r.st.ttl
	p := pause.New(pause.Config{Budget: r.pauses, MaxPaused: r.maxPaused, Chance: 0.5,
		Min: ttl * 3 / 2, Max: 3 * ttl, Seed: r.seed})
	defer p.Close()
	o := verify.MustOracle(t, r.fenced, p.OnRead)
	defer o.Close()
	keys := make([]string, r.keys)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-k%d", r.prefix, i)
	}
	// One logical process per worker: a paused process is then stopped
	// exactly at its read, never between another goroutine's lease check
	// and its write (a check-then-act gap that only fencing closes).
	// WriteMargin TTL/2: a careful holder writes only with half its TTL to
	// spare, so that a loaded machine does not deliver a write after the
	// deadline it checked.
	g := verify.StartWorkers(t, r.workers, verify.WorkerConfig{Store: r.st.url, Keys: keys, Clients: 1,
		TTL: ttl, Oracle: o.URL(), Hold: hold, Naive: r.naive, WriteMargin: ttl / 2, Seed: r.seed})
	ids := pause.WorkerIDs(g)
	// A generous bound for the pauses to happen: each takes at most 3 × TTL
	// and the workers read many times a second.
	limit := max(3*time.Minute, time.Duration(r.pauses)*3*ttl*4/time.Duration(r.maxPaused))
	if !p.Wait(limit) {
		t.Logf("only %d of %d pauses after %s", len(p.Pauses()), r.pauses, limit)
	}
	// Let the continued holders finish: each sleeps Hold, then writes (or,
	// careful, finds its lease lost) and releases.
	time.Sleep(hold + 2*ttl)
	p.Close()
	g.Stop(2 * time.Minute)
	h := g.History()
	out := outcome{runs: 1, checkers: map[string]int{}}
	out.res = verify.Check(h, verify.CheckOptions{})
	out.or = o.Check()
	out.checkers[out.res.Checker()]++
	ps := p.Pauses()
	out.pauses = len(ps)
	out.takeovers = pause.Takeovers(h, ps, ids)
	if out.res.Violations() > 0 || out.res.Checker() != "ok" || out.or.Violations() > 0 {
		first := out.res.FirstBad
		if first == "" {
			first = out.or.First
		}
		out.first = fmt.Sprintf("run %s: %s\nhistory: %s\noracle: %+v\nworker logs:\n%s", r.prefix, first, out.res, out.or, tailLines(g.Logs(), 40))
	}
	t.Logf("run %s: %d pauses (%d taken over); %s; oracle: %d reads, %d writes accepted, %d rejected, %d lost, %d stale accepted, %d after deadline",
		r.prefix, out.pauses, out.takeovers, out.res, out.or.Reads, out.or.Accepted, out.or.Rejected,
		out.or.LostUpdates, out.or.StaleAccepted, out.or.AfterDeadline)
	return out
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... %d lines before", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// campaign runs rounds of pauses on one store until total pauses are done
// (or, in the long tier, a time cap is reached; the report says how many
// were done). Each round has fresh workers and fresh keys, which keeps each
// key's history short enough for the linearizability checker.
func campaign(t *testing.T, st store, fenced, naive bool) outcome {
	total := verify.Size(20, 2000)
	perRound := verify.Size(20, 100)
	workers, keys, maxPaused := verify.Size(6, 10), verify.Size(3, 4), verify.Size(3, 4)
	capTime := verify.Size(10*time.Minute, 12*time.Minute)
	var all outcome
	start := time.Now()
	for round := 0; all.pauses < total; round++ {
		if round > 0 && time.Since(start) > capTime {
			t.Logf("stopping after %d pauses: time cap %s reached", all.pauses, capTime)
			break
		}
		n := min(perRound, total-all.pauses)
		r := do(t, run{st: st, prefix: fmt.Sprintf("r%d", round), fenced: fenced, naive: naive,
			workers: workers, keys: keys, pauses: n, maxPaused: maxPaused, seed: uint64(1000*round + 7)})
		all.add(r)
		if r.pauses == 0 {
			break // no progress: reported below
		}
	}
	return all
}

func pauseStores() []string {
	return verify.Size([]string{"sqlite", "redis", "server"}, verify.AllStores)
}

// TestHolderPauseFenced is R4 (a): careful workers (they write only while
// their local deadline is well ahead) and the fencing oracle. A holder
// stopped mid-critical-section past its TTL finds its lease lost when it
// continues and does not write; another worker has taken over meanwhile.
// Pass: 0 lost updates, 0 stale writes accepted, porcupine ok on every
// key, 0 overlapping critical sections (no two holders believed they held
// a key at once), 0 token regressions. Writes that reached the resource
// after their writer's deadline are reported, not failed on: the writer
// checked it had TTL/2 to spare before sending, so such a write was held up
// in transit by a stalled machine (see verify.OracleResult.AfterDeadline).
func TestHolderPauseFenced(t *testing.T) {
	r4(t, "R4", false, func(out outcome) int { return out.res.Violations() + out.or.Violations() },
		"%d runs, TTL %s, pauses 1.5–3×TTL, %d/%d pauses taken over; %d writes accepted, %d rejected, %d reached the resource after the writer's deadline; %s%s")
}

// TestHolderPauseNaive is R4 (b): naive workers write without checking
// their lease (a client paused by GC between its check and its write), and
// the oracle is fenced. Fencing alone must keep the counter right: 0 lost
// updates, 0 stale writes accepted, porcupine ok, 0 overlaps.
//
// Writes after the writer's local deadline are not counted as violations
// here: a naive holder continued after its deadline writes anyway, and the
// fenced resource accepts it exactly when nobody has used a newer token on
// it yet (no other holder took over, or the new holder has not read yet),
// in which case nothing is lost. Their number is in the report's note.
func TestHolderPauseNaive(t *testing.T) {
	r4(t, "R4-naive", true, func(out outcome) int {
		return out.res.Violations() + out.or.LostUpdates + out.or.StaleAccepted + out.or.CounterMismatch
	}, "%d runs, TTL %s, %d/%d pauses taken over; %d writes accepted, %d stale rejected by fencing, %d accepted after the writer's deadline (no newer token yet: not lost); %s%s")
}

// r4 runs a campaign against the fenced oracle, with naive workers or
// careful ones, on every store of pauseStores, reports it as suite and
// checks it: violations says what counts as one, and note is the format
// of the report's note, given the runs, the TTL, the pauses taken over and
// all of them, the writes accepted, rejected and after their writer's
// deadline, the time taken and the store's note.
func r4(t *testing.T, suite string, naive bool, violations func(outcome) int, note string) {
	for _, name := range pauseStores() {
		t.Run(name, func(t *testing.T) {
			st := prepare(t, name)
			began := time.Now()
			out := campaign(t, st, true, naive)
			v := violations(out)
			verify.Report(t, verify.Row{Suite: suite, Store: name, Ops: out.res.Ops, Faults: out.pauses,
				Violations: v, Checker: out.checker(),
				Note: fmt.Sprintf(note, out.runs, st.ttl, out.takeovers, out.pauses, out.or.Accepted, out.or.Rejected, out.or.AfterDeadline,
					time.Since(began).Round(time.Second), sep(st.note))})
			check(t, out, v)
		})
	}
}

func sep(note string) string {
	if note == "" {
		return ""
	}
	return "; " + note
}

// check fails the test on any violation, on an undecided checker, or when
// the run did nothing worth checking.
func check(t *testing.T, out outcome, violations int) {
	t.Helper()
	if violations > 0 || out.checker() != "ok" {
		t.Fatalf("%d violations, checker %s\n%s", violations, out.checker(), out.first)
	}
	if out.pauses == 0 || out.or.Accepted == 0 {
		t.Fatalf("nothing tested: %d pauses, %d writes accepted", out.pauses, out.or.Accepted)
	}
	if out.takeovers == 0 {
		t.Fatalf("no pause was taken over by another worker (%d pauses)", out.pauses)
	}
}

// TestHolderPauseUnfencedControl is R4 (c), the negative control: the same
// pauses with naive workers and an unfenced resource must be caught — lost
// updates or writes after the writer's deadline — in at least 9 of 10
// independent short runs. It proves the suite can fail.
func TestHolderPauseUnfencedControl(t *testing.T) {
	const runs = 10
	for _, name := range verify.Size([]string{"sqlite"}, verify.AllStores) {
		t.Run(name, func(t *testing.T) {
			st := prepare(t, name)
			began := time.Now()
			var all outcome
			caught, lostRuns := 0, 0
			for i := 0; i < runs; i++ {
				r := do(t, run{st: st, prefix: fmt.Sprintf("c%d", i), fenced: false, naive: true,
					workers: 4, keys: 2, pauses: 3, maxPaused: 2, seed: uint64(77 + i)})
				all.add(r)
				if r.or.Violations() > 0 {
					caught++
				}
				if r.or.LostUpdates > 0 {
					lostRuns++
				}
			}
			verify.Report(t, verify.Row{Suite: "R4-unfenced", Store: name, Ops: all.res.Ops, Faults: all.pauses,
				Violations: all.or.Violations(), Checker: fmt.Sprintf("caught %d/%d", caught, runs),
				Note: fmt.Sprintf("TTL %s; found %d lost updates (in %d runs), %d writes after the deadline, %d stale writes accepted; %d/%d pauses taken over; %s%s",
					st.ttl, all.or.LostUpdates, lostRuns, all.or.AfterDeadline, all.or.StaleAccepted,
					all.takeovers, all.pauses, time.Since(began).Round(time.Second), sep(st.note))})
			if caught < 9 {
				t.Fatalf("the unfenced control was caught in only %d of %d runs", caught, runs)
			}
		})
	}
}
