package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/postgres"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// Example_fencing protects writes to another table with a lease's fencing
// token: a holder that stalled past its lease cannot overwrite the work of
// the holder that took over. (Run by TestExampleFencing against the test
// server; without LEASEHOLD_TEST_POSTGRES it prints a hint.)
func Example_fencing() {
	url := os.Getenv("LEASEHOLD_TEST_POSTGRES") // postgres://user@host/db
	if url == "" {
		fmt.Println("set LEASEHOLD_TEST_POSTGRES to a PostgreSQL URL")
		return
	}
	ctx := context.Background()
	store, err := postgres.Open(ctx, url) // creates leasehold_leases if needed
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()

	// The protected resource: a row with a fence column (the highest token
	// that wrote it), here made fresh for the example.
	db.Exec(ctx, `CREATE TABLE IF NOT EXISTS example_reports (id text PRIMARY KEY, body text, fence bigint NOT NULL DEFAULT 0)`)
	db.Exec(ctx, `DELETE FROM example_reports WHERE id = 'nightly'`)
	db.Exec(ctx, `INSERT INTO example_reports (id) VALUES ('nightly')`)
	write := `UPDATE example_reports SET body = $2, fence = $3 WHERE id = $1 AND ` + postgres.Fence("fence", 3)

	a, _ := leasehold.New(store, leasehold.WithOwner("worker-a"))
	b, _ := leasehold.New(store, leasehold.WithOwner("worker-b"))
	const name = "example/reports/nightly"

	// worker-a takes the lease, writes, and then stalls: no keepalive, so
	// the lease expires after 200ms.
	la, err := a.Acquire(ctx, name, leasehold.TTL(200*time.Millisecond), leasehold.NoKeepalive())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("a writes:", postgres.FencedExec(ctx, db, write, "nightly", "draft by a", la.Token()))

	// worker-b waits for the lease (it frees when a's expires) and writes.
	lb, err := b.Acquire(ctx, name, leasehold.TTL(10*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("b writes:", postgres.FencedExec(ctx, db, write, "nightly", "final by b", lb.Token()))

	// worker-a wakes up and, not checking its lease, writes again: refused.
	err = postgres.FencedExec(ctx, db, write, "nightly", "late draft by a", la.Token())
	fmt.Println("a's late write refused:", errors.Is(err, postgres.ErrFenced), errors.Is(err, leasehold.ErrLost))

	var body string
	db.QueryRow(ctx, `SELECT body FROM example_reports WHERE id = 'nightly'`).Scan(&body)
	fmt.Println("body:", body)
	lb.Release(ctx)
}

// TestExampleFencing runs Example_fencing against the test server and
// checks what it prints.
func TestExampleFencing(t *testing.T) {
	enginetest.PostgresURL(t) // skips when unset
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	done := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(r)
		done <- b
	}()
	func() {
		defer func() { os.Stdout = stdout }()
		Example_fencing()
	}()
	w.Close()
	got := <-done
	want := "a writes: <nil>\nb writes: <nil>\na's late write refused: true true\nbody: final by b\n"
	if !bytes.Equal(got, []byte(want)) {
		t.Errorf("Example_fencing printed:\n%s\nwant:\n%s", got, want)
	}
}

func TestFence(t *testing.T) {
	if got := postgres.Fence("fence", 3); got != `"fence" <= $3` {
		t.Errorf("Fence = %s", got)
	}
	for _, bad := range []struct {
		col string
		n   int
	}{{"a b", 1}, {`x"`, 1}, {"", 1}, {"fence", 0}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Fence(%q, %d) did not panic", bad.col, bad.n)
				}
			}()
			postgres.Fence(bad.col, bad.n)
		}()
	}
}
