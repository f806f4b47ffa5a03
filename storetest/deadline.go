package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// deadlineCalls runs call up to 1,500 times (for at most 3 s) with
// deadlines of 10 µs to 2 ms — about one engine call long, so that many
// calls end at them on a remote engine; an in-process store may never
// reach one — and fails t if a call that failed other than as expected
// (settled) failed with an error not matching context.DeadlineExceeded,
// whatever part of the way noticed the deadline first: the client, the
// network, or the engine, which may get the deadline with the call.
func deadlineCalls(t *testing.T, call func(ctx context.Context, i int) error, settled func(error) bool) {
	t.Helper()
	done, deadlines, other := countDeadlines(call, settled)
	t.Logf("%d calls, %d ended by their deadline", done, deadlines)
	if len(other) > 0 {
		t.Errorf("%d calls failed with an error that does not match context.DeadlineExceeded; first: %v", len(other), other[0])
	}
}

// countDeadlines makes deadlineCalls' calls and returns how many it made,
// how many ended by their deadline, and the other errors.
func countDeadlines(call func(ctx context.Context, i int) error, settled func(error) bool) (done, deadlines int, other []error) {
	const calls = 1500
	stop := time.Now().Add(3 * time.Second)
	for i := 0; i < calls && time.Now().Before(stop); i++ {
		done++
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(10+i*7%1990)*time.Microsecond)
		err := call(ctx, i)
		cancel()
		switch {
		case err == nil, settled(err):
		case errors.Is(err, context.DeadlineExceeded):
			deadlines++
		default:
			other = append(other, err)
		}
	}
	return done, deadlines, other
}

// testDeadline: a lease call that runs into its context's deadline fails
// with context.DeadlineExceeded.
func testDeadline(t *testing.T, h Harness) {
	s := h.open(t)
	n := name(t, "d")
	deadlineCalls(t, func(ctx context.Context, _ int) error {
		rec, err := s.TryAcquire(ctx, req(n, "a", time.Minute))
		if err == nil {
			err = s.Release(ctx, n, "a", rec.Token)
		}
		return err
	}, func(err error) bool {
		var he *leasehold.HeldError
		return errors.As(err, &he) || errors.Is(err, leasehold.ErrNotHeld)
	})
}

// testRecDeadline: a record call that runs into its context's deadline
// fails with context.DeadlineExceeded (writes on keys of their own, so
// that a write whose outcome is unknown does not refuse the next one).
func testRecDeadline(t *testing.T, h RecordsHarness) {
	s := h.open(t)
	p := rprefix(t)
	deadlineCalls(t, func(ctx context.Context, i int) error {
		k := fmt.Sprintf("%sk%d", p, i)
		var err error
		switch i % 4 {
		case 0:
			_, err = s.PutRecord(ctx, k, []byte("x"), 0)
		case 1:
			_, _, err = s.AddCounter(ctx, p+"n", 1)
		case 2:
			_, err = s.GetRecord(ctx, p+"n")
		default:
			_, err = s.Txn(ctx, leasehold.Txn{Then: []leasehold.Write{{Key: k, Value: []byte("t")}}})
		}
		return err
	}, func(err error) bool {
		return errors.Is(err, leasehold.ErrNotFound) || (!h.Txn && errors.Is(err, leasehold.ErrTxnUnsupported))
	})
}

// testWaitDeadline: a queued wait that runs into its context's deadline
// fails with context.DeadlineExceeded (the lease is held throughout).
func testWaitDeadline(t *testing.T, h Harness) {
	s := h.open(t)
	q, ok := s.(leasehold.Queuer)
	if !ok {
		t.Skip("the store does not queue waiters")
	}
	n := name(t, "w")
	mustAcquire(t, s, req(n, "holder", time.Minute))
	deadlineCalls(t, func(ctx context.Context, i int) error {
		_, err := q.AcquireWait(ctx, leasehold.AcquireRequest{Name: n, Owner: "w", RequestID: fmt.Sprintf("r%d", i), TTL: time.Minute})
		if err == nil {
			return errors.New("granted a lease that is held")
		}
		return err
	}, func(error) bool { return false })
}

// PassedDeadline returns a context whose deadline has passed while its
// timer has not run yet: Err is still nil, as it can be for a moment on a
// busy machine. A store's own tests use it to check that an error its
// client or engine reports once the deadline has passed comes back as
// context.DeadlineExceeded (see storekit.DeadlinePassed).
func PassedDeadline() context.Context { return passedDeadline{context.Background()} }

type passedDeadline struct{ context.Context }

func (passedDeadline) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }
