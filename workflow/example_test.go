package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/workflow"
)

// The approval workflow of source document 004: two administrators approve
// the same request at almost the same moment. One approval applies; the
// other is told that it was already done, and by whom — never "success".
// A retry of the first approval (same request id, say after a lost reply)
// gets its original result, and a transition from a state the request has
// left is refused.
func Example() {
	ctx := context.Background()
	store := memory.New() // or sqlite, postgres, redis, etcd, a leasehold server, ...
	approvals, err := workflow.New(workflow.Definition{
		Name:    "expense",
		Initial: "DRAFT",
		Transitions: map[string][]string{
			"DRAFT":    {"PENDING"},
			"PENDING":  {"APPROVED", "REJECTED"},
			"REJECTED": {"DRAFT"},
			"APPROVED": {"PAID"},
		},
	}, workflow.Config{Records: store, Leases: store}) // adaptive by default
	if err != nil {
		fmt.Println(err)
		return
	}
	approvals.Create(ctx, "exp-42")
	approvals.Apply(ctx, workflow.Request{Instance: "exp-42", From: "DRAFT", To: "PENDING", Actor: "alice", RequestID: "submit-exp-42"})

	// Two administrators at once.
	var wg sync.WaitGroup
	results := map[string]workflow.Result{}
	var mu sync.Mutex
	for _, admin := range []string{"bob", "carol"} {
		wg.Go(func() {
			r, err := approvals.Apply(ctx, workflow.Request{Instance: "exp-42", From: "PENDING", To: "APPROVED", Actor: admin, RequestID: "approve-by-" + admin})
			if err != nil {
				fmt.Println(err)
				return
			}
			mu.Lock()
			results[admin] = r
			mu.Unlock()
		})
	}
	wg.Wait()
	var winner, other string
	if results["bob"].Outcome == workflow.Applied {
		winner, other = "bob", "carol"
	} else {
		winner, other = "carol", "bob"
	}
	fmt.Println("first approver:", results[winner].Outcome, "at version", results[winner].Version)
	r := results[other]
	fmt.Println("second approver:", r.Outcome, "| told who:", r.Entry.Actor == winner, "| which request:", r.Entry.RequestID == "approve-by-"+winner)

	// The winner's client retries after a lost reply: its original result.
	again, _ := approvals.Apply(ctx, workflow.Request{Instance: "exp-42", From: "PENDING", To: "APPROVED", Actor: winner, RequestID: "approve-by-" + winner})
	fmt.Println("retry:", again.Outcome, "version", again.Version)

	// Someone rejects from a state the request has left: the same shape
	// as the second approver's answer — the state found and who moved it.
	// Apply's error is nil for a refusal: Err says whether this request
	// is in the history.
	rej, err := approvals.Apply(ctx, workflow.Request{Instance: "exp-42", From: "PENDING", To: "REJECTED", Actor: "dave", RequestID: "reject-by-dave"})
	fmt.Println("reject:", rej.Outcome, rej.Superseded(), rej.State, "by", rej.Entry.Actor == winner, "| error:", err)
	fmt.Println("refused:", errors.Is(rej.Err(), workflow.ErrWrongState), "| second approver refused:", errors.Is(r.Err(), workflow.ErrAlreadyDone),
		"| winner:", results[winner].Err())

	history, _ := approvals.History(ctx, "exp-42")
	for _, e := range history {
		fmt.Printf("v%d %s → %s\n", e.Version, e.From, e.To)
	}
	// Output:
	// first approver: applied at version 2
	// second approver: already-done | told who: true | which request: true
	// retry: repeated version 2
	// reject: wrong-state true APPROVED by true | error: <nil>
	// refused: true | second approver refused: true | winner: <nil>
	// v1 DRAFT → PENDING
	// v2 PENDING → APPROVED
}

// The atomic counter of source document 002 ("ADD #points :incr"): many
// writers add to one counter without reading it first and without losing
// an update.
func Example_counter() {
	ctx := context.Background()
	var store leasehold.RecordStore = memory.New()
	var wg sync.WaitGroup
	for range 50 { // 50 Lambda instances, each adding 10 points
		wg.Go(func() {
			if _, _, err := store.AddCounter(ctx, "user/12345/points", 10); err != nil {
				fmt.Println(err)
			}
		})
	}
	wg.Wait()
	points, _, _ := store.AddCounter(ctx, "user/12345/points", 0)
	fmt.Println("points:", points)
	// Output:
	// points: 500
}

// The order and balance of source document 002 (TransactWriteItems): mark
// the order paid and take the amount from the user's balance, all or
// nothing. Unlike the document's version, the transaction is conditioned
// on the versions read, so it neither pays an order twice nor spends a
// balance that another writer changed in between; a conflict is retried
// with the records read afresh.
func Example_orderAndBalance() {
	ctx := context.Background()
	var store leasehold.RecordStore = memory.New()
	store.PutRecord(ctx, "orders/o-1", []byte("pending"), 0)
	store.AddCounter(ctx, "users/u-1/balance", 100)

	pay := func(order, user string, amount int64) error {
		for attempt := 0; attempt < 10; attempt++ {
			o, err := store.GetRecord(ctx, "orders/"+order)
			if err != nil {
				return err
			}
			if string(o.Value) != "pending" {
				return fmt.Errorf("order %s is %s", order, o.Value)
			}
			b, err := store.GetRecord(ctx, "users/"+user+"/balance")
			if err != nil {
				return err
			}
			balance, _ := strconv.ParseInt(string(b.Value), 10, 64)
			if balance < amount {
				return fmt.Errorf("balance %d is less than %d", balance, amount)
			}
			_, err = store.Txn(ctx, leasehold.Txn{
				If: []leasehold.Condition{
					{Key: "orders/" + order, Version: o.Version},
					{Key: "users/" + user + "/balance", Version: b.Version},
				},
				Then: []leasehold.Write{
					{Key: "orders/" + order, Value: []byte("paid")},
					{Key: "users/" + user + "/balance", Add: -amount},
				},
			})
			if errors.Is(err, leasehold.ErrConflict) {
				continue // someone wrote one of them: read again
			}
			return err
		}
		return errors.New("still conflicting after 10 attempts")
	}

	fmt.Println("first payment:", pay("o-1", "u-1", 30))
	fmt.Println("second payment:", pay("o-1", "u-1", 30))
	balance, _, _ := store.AddCounter(ctx, "users/u-1/balance", 0)
	order, _ := store.GetRecord(ctx, "orders/o-1")
	fmt.Println("balance:", balance, "order:", string(order.Value))
	// Output:
	// first payment: <nil>
	// second payment: order o-1 is paid
	// balance: 70 order: paid
}

// Optimistic locking with a version, as source document 002 describes it,
// with leasehold.Update doing the read, the conditional write and the
// bounded, jittered retries.
func Example_update() {
	ctx := context.Background()
	var store leasehold.RecordStore = memory.New()
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			_, err := leasehold.Update(ctx, store, "items/42", func(old []byte, exists bool) ([]byte, error) {
				n := 0
				if exists {
					n, _ = strconv.Atoi(string(old))
				}
				return []byte(strconv.Itoa(n + 1)), nil
			}, leasehold.UpdateOptions{MaxAttempts: 50})
			if err != nil {
				fmt.Println(err)
			}
		})
	}
	wg.Wait()
	r, _ := store.GetRecord(ctx, "items/42")
	fmt.Println("items/42 =", string(r.Value))
	// Output:
	// items/42 = 20
}
