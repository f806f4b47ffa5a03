package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/etcd"
)

// A job takes a lease and writes its result to etcd with the lease's
// token, so that a holder that stalled past its lease cannot overwrite the
// result of the one that took over.
func ExampleFencedPut() {
	ctx := context.Background()
	store, err := etcd.Open(ctx, "etcd://127.0.0.1:2379/?prefix=myapp/leases/")
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	client, err := leasehold.New(store)
	if err != nil {
		log.Fatal(err)
	}
	err = client.Do(ctx, "nightly-report", func(ctx context.Context) error {
		l, _ := leasehold.LeaseFromContext(ctx)
		err := etcd.FencedPut(ctx, store.Client(), "myapp/reports/nightly", "done", l.Token())
		if errors.Is(err, etcd.ErrFenced) {
			return fmt.Errorf("a newer holder has written: %w", err)
		}
		return err
	}, leasehold.TTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
}

// Opening the store from a URL: several endpoints, a key prefix of the
// application's own, and etcd authentication over TLS.
func ExampleOpen() {
	ctx := context.Background()
	store, err := etcd.Open(ctx, "etcds://app:secret@etcd-1:2379,etcd-2:2379,etcd-3:2379/?prefix=myapp/leases/&dial_timeout=3s")
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	rec, err := store.TryAcquire(ctx, leasehold.AcquireRequest{Name: "db-migration", Owner: "host-a", TTL: 30 * time.Second})
	var held *leasehold.HeldError
	switch {
	case errors.As(err, &held):
		fmt.Printf("held by %s for about %s more\n", held.Owner, held.Remaining)
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Println("granted with token", rec.Token)
	}
}
