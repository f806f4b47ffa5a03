package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/workflow"
)

// A caller whose reply was lost (its deadline passed, its process
// restarted) resolves its request by asking again with the same request id
// and actor, or by looking the id up: the request id says what became of
// it, whatever state the instance is in by now.
func Example_lostReply() {
	ctx := context.Background()
	store := memory.New()
	orders, _ := workflow.New(workflow.Definition{
		Name: "order", Initial: "NEW",
		Transitions: map[string][]string{"NEW": {"PAID"}, "PAID": {"SHIPPED"}, "SHIPPED": {"DELIVERED"}},
	}, workflow.Config{Records: store, Leases: store})
	orders.Create(ctx, "o-7")

	// The request id is made once per intent, before the first attempt.
	const rid = "pay-o-7-attempt-1"
	pay := workflow.Request{Instance: "o-7", From: "NEW", To: "PAID", Actor: "billing", RequestID: rid}
	short, cancel := context.WithTimeout(ctx, time.Nanosecond)
	_, err := orders.Apply(short, pay)
	cancel()
	fmt.Println("first attempt:", errors.Is(err, context.DeadlineExceeded))
	// (Whether it was applied is unknown here. Say it was, and the order
	// moved on meanwhile.)
	orders.Apply(ctx, pay)
	orders.Apply(ctx, workflow.Request{Instance: "o-7", From: "PAID", To: "SHIPPED", Actor: "warehouse", RequestID: "ship-o-7"})

	// 1. Ask again, exactly as before: the original outcome and entry.
	r, err := orders.Apply(ctx, pay)
	fmt.Println(r.Outcome, r.Entry.Version, r.Entry.Actor, err)

	// 2. Asked from the state read since, the id is refused with the entry
	// it applied: the caller learns its payment went through at version 1.
	_, err = orders.Apply(ctx, workflow.Request{Instance: "o-7", From: "SHIPPED", To: "DELIVERED", Actor: "billing", RequestID: rid})
	// It is an invalid request (errors.Is(err, leasehold.ErrInvalid)), but
	// not an *leasehold.InvalidError: errors.As finds its own type.
	var reused *workflow.RequestReusedError
	if errors.As(err, &reused) {
		fmt.Println("reused:", reused.Entry.From, "→", reused.Entry.To, "at version", reused.Entry.Version)
	}

	// 3. Or look it up, which changes nothing.
	e, err := orders.Lookup(ctx, "o-7", rid)
	fmt.Println("lookup:", e.To, e.Version, err)
	_, err = orders.Lookup(ctx, "o-7", "pay-o-7-attempt-2")
	fmt.Println("never applied:", errors.Is(err, workflow.ErrNoRequest))

	// Output:
	// first attempt: true
	// repeated 1 billing <nil>
	// reused: NEW → PAID at version 1
	// lookup: PAID 1 <nil>
	// never applied: true
}
