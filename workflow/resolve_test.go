package workflow_test

import (
	"context"
	"errors"
	"testing"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/workflow"
)

// TestRequestIDResolves: a request id always resolves. Asked again after
// the instance moved on, the same request returns its original entry
// (Repeated); asked from the state read since (another transition), or by
// another actor, it is refused with a *RequestReusedError that carries the
// entry, and nothing changes; Lookup finds the entry, and says
// ErrNoRequest for an id never applied.
func TestRequestIDResolves(t *testing.T) {
	eachStrategy(t, func(t *testing.T, e engine, s workflow.Strategy) {
		ctx := context.Background()
		w := newWF(t, counting(unique("res"), 8), e, s)
		mustCreate(t, w, "i")
		first, err := w.Transition(ctx, "i", "0", "1", "ann", "r1")
		if err != nil || first.Outcome != workflow.Applied {
			t.Fatalf("first: %+v %v", first, err)
		}
		if _, err := w.Transition(ctx, "i", "1", "2", "bob", "r2"); err != nil {
			t.Fatal(err)
		}
		// The same request again, after the instance moved on.
		r, err := w.Transition(ctx, "i", "0", "1", "ann", "r1")
		if err != nil || r.Outcome != workflow.Repeated || r.Entry != first.Entry {
			t.Fatalf("asked again: %+v %v; want repeated with %+v", r, err, first.Entry)
		}
		// The same request id from the state read since.
		_, err = w.Transition(ctx, "i", "2", "3", "ann", "r1")
		var re *workflow.RequestReusedError
		if !errors.As(err, &re) || re.Entry != first.Entry || re.From != "2" || !errors.Is(err, workflow.ErrRequestReused) || !errors.Is(err, leasehold.ErrInvalid) {
			t.Fatalf("asked from the new state: %v; want a *RequestReusedError with %+v", err, first.Entry)
		}
		// Another actor with the same request id and transition.
		_, err = w.Transition(ctx, "i", "0", "1", "mallory", "r1")
		if !errors.As(err, &re) || re.Entry != first.Entry || re.Actor != "mallory" {
			t.Fatalf("another actor: %v; want a *RequestReusedError with %+v", err, first.Entry)
		}
		// Also when the instance is back in the request's from-state
		// (the write is refused by the request record).
		w2 := newWF(t, counting(unique("res"), 8), e, s)
		if _, err := w2.Create(ctx, "i"); err != nil {
			t.Fatal(err)
		}
		if _, err := w2.Transition(ctx, "i", "0", "1", "ann", "r1"); err != nil {
			t.Fatal(err)
		}
		if _, err := w2.Transition(ctx, "i", "1", "2", "mallory", "r1"); !errors.As(err, &re) || re.Entry.Version != 1 {
			t.Fatalf("another actor from the current state: %v", err)
		}
		in, err := w.Get(ctx, "i")
		if err != nil || in.Version != 2 {
			t.Fatalf("refusals changed the instance: %+v %v", in, err)
		}
		// Lookup.
		got, err := w.Lookup(ctx, "i", "r1")
		if err != nil || got != first.Entry {
			t.Fatalf("lookup r1: %+v %v", got, err)
		}
		if _, err := w.Lookup(ctx, "i", "never"); !errors.Is(err, workflow.ErrNoRequest) {
			t.Fatalf("lookup of an id never applied: %v", err)
		}
		if _, err := w.Lookup(ctx, "nope", "r1"); !errors.Is(err, workflow.ErrNoInstance) {
			t.Fatalf("lookup on no instance: %v", err)
		}
		for _, bad := range []string{"", "r\x00"} {
			if _, err := w.Lookup(ctx, "i", bad); !errors.Is(err, leasehold.ErrInvalid) {
				t.Fatalf("lookup of %q: %v", bad, err)
			}
		}
	})
}
