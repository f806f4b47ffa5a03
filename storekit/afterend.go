package storekit

import (
	"context"
	"time"
)

// CleanupWait is how long AfterEnd holds up a caller whose context has
// ended: the clean-up of a healthy backend takes far less, and a hung one
// does not stretch the caller's timeout by more.
const CleanupWait = 250 * time.Millisecond

// AfterEnd runs clean-up that a call does after its caller's ctx ended
// (removing a queue entry, releasing a grant that raced with the end),
// with a context of its own that ends after limit, and waits for it at
// most CleanupWait: on a hung backend the call returns on time and the
// clean-up goes on in the background (what it cannot do is left to the
// entry's liveness window or the grant's TTL).
func AfterEnd(ctx context.Context, limit time.Duration, cleanup func(context.Context)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), limit)
		defer cancel()
		cleanup(rctx)
	}()
	t := time.NewTimer(CleanupWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}
