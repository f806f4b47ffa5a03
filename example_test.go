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
