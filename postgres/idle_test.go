package postgres_test

import (
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/postgres"
)

// TestLockedTxnPausedHolderBounded (issue 28, finding 1): a LockedTxn
// whose process stops between its statements (here: fn does not return,
// as a SIGSTOPped process would not) holds its row lock with its session
// "idle in transaction". Before, every other writer of the key waited for
// as long as the pause lasted (a plain Txn without any bound); now
// PostgreSQL ends the paused session after IdleBound(wait) (2s here), its
// transaction rolled back: the plain Txn applies while the holder is still
// paused, and the holder, once resumed, fails with nothing applied.
func TestLockedTxnPausedHolderBounded(t *testing.T) {
	u, _ := recordsURL(t)
	s := open(t, u)
	defer s.Close()
	ctx := ctxFor(t, 2*time.Minute)
	v0, err := s.PutRecord(ctx, "wf/p", []byte("0"), 0)
	if err != nil {
		t.Fatal(err)
	}
	inside, resume := make(chan struct{}), make(chan struct{})
	held := make(chan error, 1)
	go func() {
		_, err := s.LockedTxn(ctx, "wf/p", time.Millisecond, func(cur leasehold.Versioned, exists bool) (leasehold.Txn, error) {
			close(inside)
			<-resume // paused
			return leasehold.Txn{If: []leasehold.Condition{{Key: "wf/p", Version: cur.Version}},
				Then: []leasehold.Write{{Key: "wf/p", Value: []byte("paused")}}}, nil
		})
		held <- err
	}()
	<-inside
	plain := make(chan error, 1)
	go func() {
		_, err := s.Txn(ctx, leasehold.Txn{If: []leasehold.Condition{{Key: "wf/p", Version: v0}},
			Then: []leasehold.Write{{Key: "wf/p", Value: []byte("other")}}})
		plain <- err
	}()
	select {
	case err := <-plain:
		if err != nil {
			t.Fatalf("the other writer's Txn: %v", err)
		}
	case <-time.After(45 * time.Second): // IdleBound is 2s: generous
		close(resume)
		<-held
		t.Fatalf("the other writer still waited 45s behind a paused LockedTxn (its bound is %s)", postgres.IdleBound(time.Millisecond))
	}
	close(resume)
	if err := <-held; err == nil {
		t.Fatal("the paused LockedTxn applied after its session was ended")
	}
	r, err := s.GetRecord(ctx, "wf/p")
	if err != nil || string(r.Value) != "other" {
		t.Fatalf("record = %q, %v; want the other writer's value", r.Value, err)
	}
	// The store goes on: the next LockedTxn applies.
	if _, err := s.LockedTxn(ctx, "wf/p", time.Second, func(cur leasehold.Versioned, _ bool) (leasehold.Txn, error) {
		return leasehold.Txn{If: []leasehold.Condition{{Key: "wf/p", Version: cur.Version}},
			Then: []leasehold.Write{{Key: "wf/p", Value: []byte("next")}}}, nil
	}); err != nil && !errors.Is(err, leasehold.ErrLockTimeout) {
		t.Fatalf("the next LockedTxn: %v", err)
	}
}
