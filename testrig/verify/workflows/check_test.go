package workflows

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/workflow"
)

// TestCheckCatches shows each rule of Check catching what it is for, on
// made-up histories, and passing a correct one.
func TestCheckCatches(t *testing.T) {
	def := Chain("t")
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e1 := workflow.Entry{Instance: "i", Version: 1, From: "A", To: "B", Actor: "x", RequestID: "a", At: at, Strategy: workflow.Optimistic}
	e2 := workflow.Entry{Instance: "i", Version: 2, From: "B", To: "C", Actor: "y", RequestID: "b", At: at.Add(time.Second), Strategy: workflow.Optimistic}
	hist := []workflow.Entry{e1, e2}
	begin := func(rid string) Call { return Call{Op: "begin", RequestID: rid} }
	tr := func(kind, rid, actor, from, to string, start, end int64, ans, state string, v uint64, e *workflow.Entry) Call {
		return Call{Worker: "w", Op: "transition", Kind: kind, RequestID: rid, Actor: actor, From: from, To: to,
			Start: start, End: end, Answer: ans, State: state, Version: v, Entry: e}
	}
	good := []Call{
		begin("a"), begin("b"), begin("c"), begin("d"),
		{Worker: "w", Op: "get", Start: 1, End: 2, Answer: AnsRead, State: "A"},
		tr("unique", "a", "x", "A", "B", 3, 4, AnsApplied, "B", 1, &e1),
		tr("unique", "c", "z", "A", "B", 5, 6, AnsAlreadyDone, "B", 1, &e1),
		tr("unique", "d", "z", "C", "D", 5, 6, AnsWrongState, "B", 1, &e1),
		tr("shared", "b", "y", "B", "C", 7, 8, AnsApplied, "C", 2, &e2),
		tr("resolve", "a", "x", "A", "B", 9, 10, AnsRepeated, "B", 1, &e1),
		tr("reask", "a", "x", "C", "D", 9, 10, AnsReused, "", 0, &e1),
		tr("impostor", "a", "z", "A", "B", 9, 10, AnsReused, "", 0, &e1),
		{Worker: "w", Op: "lookup", RequestID: "b", Start: 11, End: 12, Answer: AnsFound, Entry: &e2},
		{Worker: "w", Op: "lookup", RequestID: "q", Start: 11, End: 12, Answer: AnsNotFound},
	}
	if r := Check(def, good, hist); r.Failures() != 0 {
		t.Fatalf("a correct history: %s %v", r, r.First)
	}
	other := e1
	other.Actor = "someone"
	for _, c := range []struct {
		kind  string
		add   Call
		hist  []workflow.Entry
		field func(Result) int
	}{
		{"stale", tr("unique", "c", "z", "B", "C", 9, 10, AnsWrongState, "A", 0, nil), hist, func(r Result) int { return r.Wrong }},
		{"refused-applied", tr("resolve", "a", "x", "C", "D", 5, 6, AnsWrongState, "B", 1, &e1), hist, func(r Result) int { return r.Wrong }},
		{"repeated-other-intent", tr("impostor", "a", "z", "A", "B", 9, 10, AnsRepeated, "B", 1, &e1), hist, func(r Result) int { return r.Wrong }},
		{"reused-same-intent", tr("resolve", "a", "x", "A", "B", 9, 10, AnsReused, "", 0, &e1), hist, func(r Result) int { return r.Wrong }},
		{"not-in-history", Call{Worker: "w", Op: "get", Start: 9, End: 10, Answer: AnsRead, State: "D", Version: 2}, hist, func(r Result) int { return r.Wrong }},
		{"entry-mismatch", tr("unique", "c", "z", "A", "B", 5, 6, AnsAlreadyDone, "B", 1, &other), hist, func(r Result) int { return r.Wrong }},
		{"lost", tr("unique", "e", "x", "C", "D", 9, 10, AnsApplied, "D", 3, &workflow.Entry{Version: 3, RequestID: "e"}), hist, func(r Result) int { return r.Lost }},
		{"applied-twice", begin("e"), []workflow.Entry{e1, e2, {Instance: "i", Version: 3, From: "C", To: "D", Actor: "x", RequestID: "a"}}, func(r Result) int { return r.Duplicated }},
		{"chain", begin("e"), []workflow.Entry{e1, e2, {Instance: "i", Version: 3, From: "A", To: "B", RequestID: "e"}}, func(r Result) int { return r.Duplicated }},
		{"phantom", begin("e"), []workflow.Entry{e1, e2, {Instance: "i", Version: 3, From: "C", To: "D", RequestID: "nobody"}}, func(r Result) int { return r.Phantom }},
		{"lookup-missed", Call{Worker: "w", Op: "lookup", RequestID: "a", Start: 9, End: 10, Answer: AnsNotFound}, hist, func(r Result) int { return r.Wrong }},
		{"unresolved", tr("resolve", "c", "z", "B", "C", 9, 10, AnsLockTimeout, "", 0, nil), hist, func(r Result) int { return r.Unresolved }},
	} {
		t.Run(c.kind, func(t *testing.T) {
			calls := append(append([]Call{}, good...), c.add)
			r := Check(def, calls, c.hist)
			if c.field(r) != 1 || r.Kinds[c.kind] != 1 || r.Failures() != 1 {
				t.Fatalf("%s: %s %v; want exactly one %s", c.kind, r, r.First, c.kind)
			}
		})
	}
}
