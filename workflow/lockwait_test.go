package workflow_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/workflow"
)

// contendTwice runs two transitions of this process on instance i of w,
// the second a second after the first, while what they need is held
// elsewhere: the first waits for it, the second for its turn behind the
// first, then for it. It returns their errors and how long the second
// took.
func contendTwice(t *testing.T, w *workflow.Workflows) ([]error, time.Duration) {
	t.Helper()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	var took time.Duration
	for k, req := range []string{"r1", "r2"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			_, errs[k] = w.Transition(context.Background(), "i", "0", "1", "ann", req)
			if k == 1 {
				took = time.Since(start)
			}
		}()
		time.Sleep(time.Second)
	}
	wg.Wait()
	return errs, took
}

// checkWaitErrors: each error matches ErrLockTimeout, names what it
// waited for (and not the other), says "(waited" once, and the later
// caller, who waited for its turn first, was answered within its one
// LockWait (4s; generous bound 6s). Before, the turn and the lock each
// had a LockWait (the later caller took 7s), the error said "(waited 4s)
// (waited 4s)", and a lease's said "record lock not granted in time".
func checkWaitErrors(t *testing.T, errs []error, took time.Duration, want, notWant string) {
	t.Helper()
	for _, err := range errs {
		if !errors.Is(err, leasehold.ErrLockTimeout) {
			t.Fatalf("error %v, want one matching leasehold.ErrLockTimeout", err)
		}
		msg := err.Error()
		if n := strings.Count(msg, "(waited"); n != 1 || !strings.Contains(msg, want) || strings.Contains(msg, notWant) {
			t.Errorf("error %q: want %q in it, not %q, and one \"(waited\" (found %d)", msg, want, notWant, n)
		}
	}
	if took > 6*time.Second {
		t.Errorf("the later caller was answered after %s: the turn and the wait for the lock each spent LockWait (4s)", took)
	}
}

// TestLockWaitSpentOnce (issue 28, finding 2): LockWait bounds the whole
// call, the turn behind this process's other transitions included.
func TestLockWaitSpentOnce(t *testing.T) {
	for _, e := range engines(t) {
		locker, rowLocks := e.records.(leasehold.RecordLocker)
		if e.name == "postgres" && rowLocks {
			t.Run(e.name+"/pessimistic", func(t *testing.T) {
				def := counting(unique("lw"), 2)
				w, err := workflow.New(def, workflow.Config{Records: e.records, Leases: e.leases, Owner: "p1",
					Strategy: workflow.Pessimistic, LockWait: 4 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := w.Create(context.Background(), "i"); err != nil {
					t.Fatal(err)
				}
				locked, release := make(chan struct{}), make(chan struct{})
				held := make(chan error, 1)
				go func() {
					_, err := locker.LockedTxn(context.Background(), "wf/"+def.Name+"/i/i", time.Minute,
						func(leasehold.Versioned, bool) (leasehold.Txn, error) {
							close(locked)
							<-release
							return leasehold.Txn{}, errors.New("outside holder done")
						})
					held <- err
				}()
				<-locked
				errs, took := contendTwice(t, w)
				close(release)
				<-held
				checkWaitErrors(t, errs, took, "record lock", "lease")
			})
		}
		t.Run(e.name+"/lease", func(t *testing.T) {
			def := counting(unique("lw"), 2)
			w, err := workflow.New(def, workflow.Config{Records: e.records, Leases: e.leases, Owner: "p1",
				Strategy: workflow.Lease, LockWait: 4 * time.Second, LeaseTTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if _, err := w.Create(ctx, "i"); err != nil {
				t.Fatal(err)
			}
			rec, err := e.leases.TryAcquire(ctx, leasehold.AcquireRequest{Name: "wf/" + def.Name + "/lock/i", Owner: "outside", TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			defer e.leases.Release(ctx, rec.Name, "outside", rec.Token)
			errs, took := contendTwice(t, w)
			checkWaitErrors(t, errs, took, "lease \"wf/"+def.Name+"/lock/i\" not granted in time", "record lock")
		})
	}
}
