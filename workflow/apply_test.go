package workflow_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/workflow"
)

// TestApply: Apply takes a Request and answers every "someone else moved
// it" in one shape — AlreadyDone and WrongState results, both Superseded,
// with the state and version found and the entry that moved it there; the
// strategy reported is the one that served (Pessimistic without row locks
// is a lease and says so).
func TestApply(t *testing.T) {
	eachStrategy(t, func(t *testing.T, e engine, s workflow.Strategy) {
		ctx := context.Background()
		w := newWF(t, approval(unique("apply")), e, s)
		mustCreate(t, w, "d")
		submit := workflow.Request{Instance: "d", From: "DRAFT", To: "PENDING", Actor: "alice", RequestID: "s1"}
		r, err := w.Apply(ctx, submit)
		if err != nil || r.Outcome != workflow.Applied || r.Superseded() {
			t.Fatalf("submit: %+v %v", r, err)
		}
		_, rowLocks := e.records.(leasehold.RecordLocker)
		want := s
		if s == workflow.Pessimistic && !rowLocks {
			want = workflow.Lease
		}
		if w.Serves() != want || (s != workflow.Adaptive && (r.Strategy != want || r.Entry.Strategy != want)) {
			t.Fatalf("served by %s, result says %s, entry %s; want %s", w.Serves(), r.Strategy, r.Entry.Strategy, want)
		}
		approve, err := w.Apply(ctx, workflow.Request{Instance: "d", From: "PENDING", To: "APPROVED", Actor: "bob", RequestID: "a-bob"})
		if err != nil || approve.Outcome != workflow.Applied {
			t.Fatalf("approve: %+v %v", approve, err)
		}
		// Carol approves too late: already done, by bob.
		late, err := w.Apply(ctx, workflow.Request{Instance: "d", From: "PENDING", To: "APPROVED", Actor: "carol", RequestID: "a-carol"})
		if err != nil || late.Outcome != workflow.AlreadyDone || !late.Superseded() || late.State != "APPROVED" || late.Version != 2 || late.Entry != approve.Entry {
			t.Fatalf("late approval: %+v %v", late, err)
		}
		// Dave rejects: wrong state, in the same shape, not an error.
		rej, err := w.Apply(ctx, workflow.Request{Instance: "d", From: "PENDING", To: "REJECTED", Actor: "dave", RequestID: "r-dave"})
		if err != nil || rej.Outcome != workflow.WrongState || !rej.Superseded() || rej.State != "APPROVED" || rej.Version != 2 || rej.Entry != approve.Entry ||
			!strings.Contains(rej.String(), "moved there by bob") {
			t.Fatalf("late rejection: %+v %v", rej, err)
		}
		// Transition (deprecated) still answers it as an error.
		if _, err := w.Transition(ctx, "d", "PENDING", "REJECTED", "dave", "r-dave"); !errors.Is(err, workflow.ErrWrongState) {
			t.Fatalf("Transition's wrong state: %v", err)
		}
		// Errors stay errors, and change nothing.
		if _, err := w.Apply(ctx, workflow.Request{Instance: "d", From: "DRAFT", To: "APPROVED", Actor: "x", RequestID: "y"}); !errors.Is(err, workflow.ErrNotAllowed) {
			t.Fatalf("not allowed: %v", err)
		}
		if _, err := w.Apply(ctx, workflow.Request{Instance: "d", From: "APPROVED", To: "ARCHIVED", Actor: "x"}); !errors.Is(err, leasehold.ErrInvalid) {
			t.Fatalf("no request id: %v", err)
		}
		// Before any transition: WrongState with version 0 and no entry.
		if _, err := w.Create(ctx, "fresh"); err != nil {
			t.Fatal(err)
		}
		r, err = w.Apply(ctx, workflow.Request{Instance: "fresh", From: "PENDING", To: "APPROVED", Actor: "x", RequestID: "z"})
		if err != nil || r.Outcome != workflow.WrongState || r.State != "DRAFT" || r.Version != 0 || r.Entry != (workflow.Entry{}) {
			t.Fatalf("fresh instance: %+v %v", r, err)
		}
		if in, _ := w.Get(ctx, "d"); in.Version != 2 {
			t.Fatalf("refusals changed the instance: %+v", in)
		}
	})
}

// TestApplyLabel: a Request's Label is recorded beside its Actor (the
// result, the instance's last entry, the history, Lookup), is checked like
// an actor when given, and is not part of the request's identity: the same
// request id asked again with another label is Repeated, with the label
// first recorded. Records written before labels existed stay readable.
func TestApplyLabel(t *testing.T) {
	ctx := context.Background()
	e := engines(t)[0] // memory: what is tested is the entry, not the store
	for _, s := range strategies {
		t.Run(string(s), func(t *testing.T) {
			def := approval(unique("label"))
			w := newWF(t, def, e, s)
			// An instance written by an older version: no label anywhere.
			const at = "2025-01-02T03:04:05Z"
			old := `{"instance":"d","version":1,"from":"DRAFT","to":"PENDING","actor":"alice","request_id":"s1","at":"` + at + `","strategy":"optimistic"}`
			for key, value := range map[string]string{
				"wf/" + def.Name + "/i/d":                      `{"state":"PENDING","version":1,"created":"` + at + `","last":` + old + `}`,
				"wf/" + def.Name + "/h/d/00000000000000000001": old,
				"wf/" + def.Name + "/r/d/s1":                   old,
			} {
				if _, err := e.records.PutRecord(ctx, key, []byte(value), 0); err != nil {
					t.Fatal(err)
				}
			}
			bad := workflow.Request{Instance: "d", From: "PENDING", To: "APPROVED", Actor: "bob", Label: "x\x00y", RequestID: "a1"}
			var inv *leasehold.InvalidError
			if _, err := w.Apply(ctx, bad); !errors.As(err, &inv) || inv.Field != "label" {
				t.Fatalf("label with a NUL: %v, want an *InvalidError on label", err)
			}
			approve := workflow.Request{Instance: "d", From: "PENDING", To: "APPROVED", Actor: "bob", Label: "admin", RequestID: "a1"}
			r, err := w.Apply(ctx, approve)
			if err != nil || r.Outcome != workflow.Applied || r.Entry.Actor != "bob" || r.Entry.Label != "admin" || r.Version != 2 {
				t.Fatalf("approve: %+v %v", r, err)
			}
			again := approve
			again.Label = "someone else"
			r, err = w.Apply(ctx, again)
			if err != nil || r.Outcome != workflow.Repeated || r.Entry.Label != "admin" {
				t.Fatalf("the same request with another label: %+v %v, want Repeated with label admin", r, err)
			}
			in, err := w.Get(ctx, "d")
			if err != nil || in.LastActor != "bob" || in.Last == nil || in.Last.Label != "admin" {
				t.Fatalf("instance: %+v %v", in, err)
			}
			h, err := w.History(ctx, "d")
			if err != nil || len(h) != 2 || h[0].Actor != "alice" || h[0].Label != "" || h[1].Actor != "bob" || h[1].Label != "admin" {
				t.Fatalf("history: %+v %v", h, err)
			}
			if l, err := w.Lookup(ctx, "d", "a1"); err != nil || l.Label != "admin" {
				t.Fatalf("lookup: %+v %v", l, err)
			}
			if l, err := w.Lookup(ctx, "d", "s1"); err != nil || l.Actor != "alice" || l.Label != "" {
				t.Fatalf("lookup of the old entry: %+v %v", l, err)
			}
		})
	}
}

// TestResultErr: Result.Err makes Apply's refusals (nil error) visible as
// errors, and is nil for the outcomes whose request is in the history
// (issue 28's API note).
func TestResultErr(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	w, err := workflow.New(workflow.Definition{Name: "e", Initial: "A", Transitions: map[string][]string{"A": {"B", "C"}, "B": {"C"}}},
		workflow.Config{Records: st, Leases: st, Strategy: workflow.Optimistic})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Create(ctx, "i"); err != nil {
		t.Fatal(err)
	}
	ab := workflow.Request{Instance: "i", From: "A", To: "B", Actor: "a", RequestID: "r1"}
	res, err := w.Apply(ctx, ab)
	if err != nil || res.Err() != nil {
		t.Fatalf("applied: %v, Err %v", err, res.Err())
	}
	if res, err = w.Apply(ctx, ab); err != nil || res.Outcome != workflow.Repeated || res.Err() != nil {
		t.Fatalf("repeated: %+v, %v, Err %v", res, err, res.Err())
	}
	res, err = w.Apply(ctx, workflow.Request{Instance: "i", From: "A", To: "B", Actor: "b", RequestID: "r2"})
	if err != nil || res.Outcome != workflow.AlreadyDone || !errors.Is(res.Err(), workflow.ErrAlreadyDone) {
		t.Fatalf("already done: %+v, %v, Err %v", res, err, res.Err())
	}
	res, err = w.Apply(ctx, workflow.Request{Instance: "i", From: "A", To: "C", Actor: "c", RequestID: "r3"})
	var ws *workflow.WrongStateError
	if err != nil || res.Outcome != workflow.WrongState || !errors.As(res.Err(), &ws) || ws.Current != "B" || ws.Version != 1 ||
		ws.Last == nil || ws.Last.RequestID != "r1" || !errors.Is(res.Err(), workflow.ErrWrongState) {
		t.Fatalf("wrong state: %+v, %v, Err %v", res, err, res.Err())
	}
	// The same refusal from the deprecated Transition, for comparison.
	if _, terr := w.Transition(ctx, "i", "A", "C", "c", "r3"); !strings.HasSuffix(terr.Error(), res.Err().Error()) {
		t.Errorf("Err %q, Transition's error %q", res.Err(), terr)
	}
}
