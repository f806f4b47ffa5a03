package workflows

import (
	"fmt"
	"slices"
	"strings"

	"github.com/leasehold/leasehold/workflow"
)

// Result is what Check found. Lost, Duplicated, Phantom, Wrong and
// Unresolved are failures; the rest are counts for the report.
type Result struct {
	Calls       int // transitions, reads and lookups answered
	Transitions int // entries in the history
	// Lost: an acknowledged entry missing from the history (or different
	// there). Duplicated: a request id applied twice, or a history that is
	// not one chain of allowed transitions. Phantom: an entry whose request
	// id no worker sent.
	Lost, Duplicated, Phantom int
	// Wrong: answers the history contradicts (stale refusals and reads, a
	// refusal of an applied id, a repeated for another actor, an entry
	// that differs from the history's).
	Wrong int
	// Unresolved: a lost reply asked again (or looked up) that got no
	// answer saying what became of the request.
	Unresolved int
	// Answers counts the answers by kind; Kinds the failures by kind
	// (stale, refused-applied, repeated-other-intent, entry-mismatch, ...).
	Answers, Kinds map[string]int
	// First holds the first two failures of each kind, for the log.
	First []string
}

// Failures is the number of failures of every kind.
func (r Result) Failures() int { return r.Lost + r.Duplicated + r.Phantom + r.Wrong + r.Unresolved }

func (r Result) String() string {
	keys := make([]string, 0, len(r.Answers))
	for k := range r.Answers {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, r.Answers[k]))
	}
	var kinds []string
	for k, n := range r.Kinds {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
	}
	slices.Sort(kinds)
	return fmt.Sprintf("%d calls, %d transitions; lost %d, duplicated %d, phantom %d, wrong %d, unresolved %d (%s); answers: %s",
		r.Calls, r.Transitions, r.Lost, r.Duplicated, r.Phantom, r.Wrong, r.Unresolved, strings.Join(kinds, ", "), strings.Join(parts, ", "))
}

func (r *Result) fail(n *int, kind, format string, args ...any) {
	*n++
	r.Kinds[kind]++
	if r.Kinds[kind] <= 2 {
		r.First = append(r.First, fmt.Sprintf(format, args...))
	}
}

func sameEntry(a, b workflow.Entry) bool {
	return a.Instance == b.Instance && a.Version == b.Version && a.From == b.From && a.To == b.To &&
		a.Actor == b.Actor && a.RequestID == b.RequestID && a.At.Equal(b.At) && a.Strategy == b.Strategy && a.Token == b.Token
}

// Check validates every answer in calls against hist, the instance's
// final history (def's initial state at version 0).
func Check(def workflow.Definition, calls []Call, hist []workflow.Entry) Result {
	r := Result{Transitions: len(hist), Answers: map[string]int{}, Kinds: map[string]int{}}
	// The history: one chain of allowed transitions, each request id once,
	// each sent by someone.
	byRID := map[string]workflow.Entry{}
	begun := map[string]bool{}
	for _, c := range calls {
		if c.Op == "begin" {
			begun[c.RequestID] = true
		}
	}
	state := def.Initial
	for i, e := range hist {
		if e.Version != uint64(i+1) || e.From != state || !def.Allowed(e.From, e.To) {
			r.fail(&r.Duplicated, "chain", "history entry %d is %+v after state %q", i+1, e, state)
		}
		state = e.To
		if _, dup := byRID[e.RequestID]; dup {
			r.fail(&r.Duplicated, "applied-twice", "request %s applied twice (versions %d and %d)", e.RequestID, byRID[e.RequestID].Version, e.Version)
			continue
		}
		byRID[e.RequestID] = e
		if !begun[e.RequestID] {
			r.fail(&r.Phantom, "phantom", "entry %d has request id %s that no worker sent", e.Version, e.RequestID)
		}
	}
	stateAt := func(v uint64) (string, bool) {
		if v == 0 {
			return def.Initial, true
		}
		if v > uint64(len(hist)) {
			return "", false
		}
		return hist[v-1].To, true
	}

	// Lower bounds: the highest version any answer that finished before a
	// call started had seen; a refusal or read must not name an older one.
	type seen struct {
		end int64
		v   uint64
	}
	var marks []seen
	for _, c := range calls {
		if c.Op == "begin" || c.Op == "gave-up" {
			continue
		}
		switch c.Answer {
		case AnsApplied, AnsRepeated, AnsReused, AnsFound:
			if c.Entry != nil {
				marks = append(marks, seen{c.End, c.Entry.Version})
			}
		case AnsAlreadyDone, AnsWrongState, AnsRead:
			marks = append(marks, seen{c.End, c.Version})
		}
	}
	slices.SortFunc(marks, func(a, b seen) int { return int(min(max(a.end-b.end, -1), 1)) })
	prefix := make([]uint64, len(marks))
	for i, m := range marks {
		prefix[i] = m.v
		if i > 0 {
			prefix[i] = max(prefix[i], prefix[i-1])
		}
	}
	lowerBound := func(start int64) uint64 {
		i, _ := slices.BinarySearchFunc(marks, start, func(m seen, t int64) int { return int(min(max(m.end-t, -1), 1)) })
		if i == 0 {
			return 0
		}
		return prefix[i-1]
	}
	// When each request id was first acknowledged as applied.
	ackedAt := map[string]int64{}
	for _, c := range calls {
		if c.Entry == nil || c.RequestID == "" || c.Entry.RequestID != c.RequestID {
			continue
		}
		switch c.Answer {
		case AnsApplied, AnsRepeated, AnsReused, AnsFound:
			if t, ok := ackedAt[c.RequestID]; !ok || c.End < t {
				ackedAt[c.RequestID] = c.End
			}
		}
	}

	for _, c := range calls {
		if c.Op == "begin" || c.Op == "handoff" {
			continue
		}
		if c.Op == "gave-up" {
			r.fail(&r.Unresolved, "unresolved", "%s gave up resolving %s after 20s: %s", c.Worker, c.RequestID, c.Err)
			continue
		}
		r.Calls++
		r.Answers[c.Answer]++
		lb := lowerBound(c.Start)
		applied, isApplied := byRID[c.RequestID]
		switch c.Answer {
		case AnsApplied, AnsRepeated, AnsReused, AnsFound:
			if c.Entry == nil {
				r.fail(&r.Wrong, "no-entry", "%s %s %s without an entry", c.Worker, c.Answer, c.RequestID)
				break
			}
			e := *c.Entry
			if !isApplied || !sameEntry(applied, e) {
				r.fail(&r.Lost, "lost", "%s %s %s: entry %+v, history has %+v (found %v)", c.Worker, c.Answer, c.RequestID, e, applied, isApplied)
				break
			}
			intent := e.Actor == c.Actor && e.From == c.From && e.To == c.To
			switch {
			case c.Answer == AnsApplied && !intent:
				r.fail(&r.Wrong, "applied-other-intent", "%s applied %s as %+v, asked %s %s→%s", c.Worker, c.RequestID, e, c.Actor, c.From, c.To)
			case c.Answer == AnsRepeated && !intent:
				r.fail(&r.Wrong, "repeated-other-intent", "%s: repeated for %s %s→%s with the entry of %s %s→%s (request %s)", c.Worker, c.Actor, c.From, c.To, e.Actor, e.From, e.To, c.RequestID)
			case c.Answer == AnsReused && intent:
				r.fail(&r.Wrong, "reused-same-intent", "%s: request %s refused as reused although asked as applied (%+v)", c.Worker, c.RequestID, e)
			}
		case AnsAlreadyDone, AnsWrongState, AnsRead:
			s, ok := stateAt(c.Version)
			switch {
			case !ok || s != c.State:
				r.fail(&r.Wrong, "not-in-history", "%s %s names %s at version %d; the history has %q there", c.Worker, c.Answer, c.State, c.Version, s)
			case c.Version < lb:
				r.fail(&r.Wrong, "stale", "%s %s %s %s→%s is stale: names version %d (%s), %d had been seen before the call", c.Worker, c.Answer, c.RequestID, c.From, c.To, c.Version, c.State, lb)
			case c.Answer == AnsRead:
			case isApplied && applied.Version <= c.Version:
				r.fail(&r.Wrong, "refused-applied", "%s %s for request %s at version %d, but it was applied at version %d", c.Worker, c.Answer, c.RequestID, c.Version, applied.Version)
			case c.Answer == AnsWrongState && c.State == c.From:
				r.fail(&r.Wrong, "wrong-state-is-from", "%s wrong-state %s→%s naming state %s", c.Worker, c.From, c.To, c.State)
			case c.Version > 0 && (c.Entry == nil || !sameEntry(*c.Entry, hist[c.Version-1])):
				r.fail(&r.Wrong, "entry-mismatch", "%s %s: the last entry %+v is not the history's %+v", c.Worker, c.Answer, c.Entry, hist[c.Version-1])
			case c.Answer == AnsAlreadyDone && (c.State != c.To || c.Entry.RequestID == c.RequestID):
				r.fail(&r.Wrong, "already-done-mismatch", "%s already-done %s→%s with %+v", c.Worker, c.From, c.To, c.Entry)
			}
		case AnsNotFound:
			if t, ok := ackedAt[c.RequestID]; ok && t < c.Start {
				r.fail(&r.Wrong, "lookup-missed", "%s: lookup of %s found nothing after it was acknowledged", c.Worker, c.RequestID)
			}
		}
		if (c.Kind == "resolve" || c.Kind == "reask" || c.Op == "lookup") && !definitive(c.Answer) {
			if c.Answer == AnsLockTimeout || c.Answer == AnsInvalid {
				r.fail(&r.Unresolved, "unresolved", "%s %s of %s %s→%s: %s", c.Worker, c.Kind, c.RequestID, c.From, c.To, c.Err)
			}
		}
	}
	return r
}
