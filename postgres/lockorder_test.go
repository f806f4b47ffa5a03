package postgres_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/postgres"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// TestLockedTxnBesideTxn is the lock cycle of issue 28: a LockedTxn holds
// its key ("wf/i") and its Txn also writes a key that sorts before it
// ("wf/h/N"), which a plain Txn has already taken (its placeholder) while
// it waits for "wf/i". Before, both waited until PostgreSQL's deadlock
// detector killed one of them (SQLSTATE 40P01, returned to the caller).
// Now LockedTxn takes "wf/h/N" without waiting, finds it busy, lets
// "wf/i" go and takes both again in key order: the plain Txn applies,
// then LockedTxn decides again from the record as the plain Txn left it
// and applies too. No deadlock.
func TestLockedTxnBesideTxn(t *testing.T) {
	u, records := recordsURL(t)
	txnFn := strings.TrimSuffix(records, "_records") + "_txn"
	s := open(t, u)
	defer s.Close()
	ctx := ctxFor(t, time.Minute)
	v0, err := s.PutRecord(ctx, "wf/i", []byte("0"), 0)
	if err != nil {
		t.Fatal(err)
	}
	inside, goOn := make(chan struct{}), make(chan struct{})
	// fn waits for goOn holding a pooled connection and its lock: if the
	// test ends before it lets fn go, s.Close (deferred above) waits for
	// that connection, for ever (pgxpool's Close waits for every acquired
	// connection). letGo runs before it in any case.
	letGo := sync.OnceFunc(func() { close(goOn) })
	defer letGo()
	locked := make(chan error, 1)
	seen := []string{}
	go func() {
		_, err := s.LockedTxn(ctx, "wf/i", 10*time.Second, func(cur leasehold.Versioned, exists bool) (leasehold.Txn, error) {
			seen = append(seen, string(cur.Value))
			if len(seen) == 1 {
				close(inside)
				<-goOn
			}
			n := string(cur.Value)
			return leasehold.Txn{
				If:   []leasehold.Condition{{Key: "wf/i", Version: cur.Version}, {Key: "wf/h/" + n}},
				Then: []leasehold.Write{{Key: "wf/i", Value: []byte(n + "+locked")}, {Key: "wf/h/" + n, Value: []byte("locked")}},
			}, nil
		})
		locked <- err
	}()
	select {
	case <-inside:
	case err := <-locked:
		t.Fatalf("LockedTxn returned (%v) before it ran fn", err)
	case <-ctx.Done():
		t.Fatal("LockedTxn did not run fn within a minute")
	}
	plain := make(chan error, 1)
	go func() {
		_, err := s.Txn(ctx, leasehold.Txn{
			If:   []leasehold.Condition{{Key: "wf/i", Version: v0}, {Key: "wf/h/0"}},
			Then: []leasehold.Write{{Key: "wf/i", Value: []byte("1")}, {Key: "wf/h/0", Value: []byte("plain")}},
		})
		plain <- err
	}()
	waitForLockWait(t, ctx, txnFn)
	letGo()
	if err := recvErr(t, plain, "the plain Txn"); err != nil {
		t.Errorf("plain Txn beside LockedTxn: %v", err)
	}
	if err := recvErr(t, locked, "LockedTxn"); err != nil {
		t.Errorf("LockedTxn beside a plain Txn: %v", err)
	}
	if len(seen) != 2 || seen[1] != "1" {
		t.Errorf("LockedTxn's fn saw %q, want the record before and after the plain Txn", seen)
	}
	if r, err := s.GetRecord(ctx, "wf/i"); err != nil || string(r.Value) != "1+locked" {
		t.Errorf("wf/i = %q, %v; want 1+locked", r.Value, err)
	}
	if n := postgres.Deadlocks(s); n != 0 {
		t.Errorf("%d deadlocks", n)
	}
	if n := postgres.Relocks(s); n != 1 {
		t.Errorf("LockedTxn took its locks again %d times, want 1", n)
	}
}

// recvErr receives the error of what (a call in a goroutine) from ch,
// failing the test if it has not come within 2 minutes: the calls have
// contexts of a minute, so one still running then waits for something
// that will not come.
func recvErr(t *testing.T, ch <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s did not return within 2 minutes", what)
		return nil
	}
}

// waitForLockWait waits until a session running the txn function fn waits
// for a lock.
func waitForLockWait(t *testing.T, ctx context.Context, fn string) {
	t.Helper()
	c, err := pgx.Connect(ctx, enginetest.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	for ctx.Err() == nil {
		var n int
		err := c.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND strpos(query, $1) > 0`, fn).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("the plain Txn never waited for the lock")
}
