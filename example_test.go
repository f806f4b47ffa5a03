package leasehold_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/memory"
)

func Example() {
	ctx := context.Background()
	store := memory.New() // or sqlite.Open(path) for leases shared by processes
	worker, _ := leasehold.New(store, leasehold.WithOwner("worker-1"))

	lease, err := worker.TryAcquire(ctx, "reports/nightly", leasehold.TTL(30*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("holding", lease.Name(), "with token", lease.Token())

	other, _ := leasehold.New(store, leasehold.WithOwner("worker-2"))
	_, err = other.TryAcquire(ctx, "reports/nightly")
	var held *leasehold.HeldError
	if errors.As(err, &held) {
		fmt.Println("worker-2 refused: held by", held.Owner, "token", held.Token)
	}

	lease.Release(ctx)
	lease2, _ := other.TryAcquire(ctx, "reports/nightly")
	fmt.Println("worker-2 now holds it with token", lease2.Token())
	lease2.Release(ctx)
	// Output:
	// holding reports/nightly with token 1
	// worker-2 refused: held by worker-1 token 1
	// worker-2 now holds it with token 2
}

func ExampleClient_Do() {
	ctx := context.Background()
	client, _ := leasehold.New(memory.New(), leasehold.WithOwner("cron@host-a"))
	err := client.Do(ctx, "jobs/cleanup", func(ctx context.Context) error {
		lease, _ := leasehold.LeaseFromContext(ctx)
		// ctx is cancelled if the lease is lost; pass the token to the
		// resource you write so it can reject older holders.
		fmt.Println("cleaning up under token", lease.Token())
		return nil
	}, leasehold.TTL(time.Minute))
	fmt.Println("done:", err)
	// Output:
	// cleaning up under token 1
	// done: <nil>
}

func ExampleClient_Acquire() {
	ctx := context.Background()
	store := memory.New()
	a, _ := leasehold.New(store, leasehold.WithOwner("a"))
	b, _ := leasehold.New(store, leasehold.WithOwner("b"))

	first, _ := a.TryAcquire(ctx, "deploy", leasehold.TTL(time.Minute))
	got := make(chan *leasehold.Lease)
	go func() {
		// Waits (on the store's push notification) until a releases.
		l, _ := b.Acquire(ctx, "deploy", leasehold.TTL(time.Minute))
		got <- l
	}()
	time.Sleep(10 * time.Millisecond)
	first.Release(ctx)
	second := <-got
	fmt.Println(second.Owner(), "holds deploy with token", second.Token())
	second.Release(ctx)
	// Output: b holds deploy with token 2
}

func ExampleSemaphore() {
	ctx := context.Background()
	store := memory.New()
	client, _ := leasehold.New(store, leasehold.WithOwner("encoder-1"))
	// At most 2 encodes at once across every process sharing the store.
	sem, _ := client.Semaphore("jobs/encode", 2)

	a, _ := sem.TryAcquire(ctx, leasehold.TTL(time.Minute))
	b, _ := sem.TryAcquire(ctx, leasehold.TTL(time.Minute))
	_, err := sem.TryAcquire(ctx, leasehold.TTL(time.Minute))
	fmt.Println("third permit refused:", errors.Is(err, leasehold.ErrNoPermit))

	a.Release(ctx)
	c, _ := sem.TryAcquire(ctx, leasehold.TTL(time.Minute))
	holders, _ := sem.Holders(ctx)
	fmt.Println("holders:", len(holders))
	b.Release(ctx)
	c.Release(ctx)
	// Output:
	// third permit refused: true
	// holders: 2
}

func ExampleElection() {
	ctx := context.Background()
	store := memory.New()
	primary, _ := leasehold.New(store, leasehold.WithOwner("node-a"))
	standby, _ := leasehold.New(store, leasehold.WithOwner("node-b"))
	ea, _ := primary.Election("payments/primary", leasehold.TTL(10*time.Second), leasehold.Data([]byte("10.0.0.1:8443")))
	eb, _ := standby.Election("payments/primary", leasehold.TTL(10*time.Second), leasehold.Data([]byte("10.0.0.2:8443")))

	lead, _ := ea.Campaign(ctx) // node-a leads; node-b would block here
	leader, _ := eb.Leader(ctx)
	fmt.Printf("leader %s at %s, term %d\n", leader.Identity, leader.Data, leader.Term)

	lead.Release(ctx)           // resign: a standby takes over at once
	next, _ := eb.Campaign(ctx) // returns immediately now
	fmt.Println("new term", next.Token(), "for", next.Owner())
	next.Release(ctx)
	// Output:
	// leader node-a at 10.0.0.1:8443, term 1
	// new term 2 for node-b
}
