package storekit

import (
	"context"
	"time"
)

// DeadlinePassed reports whether ctx's deadline has passed by the clock,
// even if ctx does not say so yet. A store uses it to answer a call that
// ran into its deadline with context.DeadlineExceeded, as the conformance
// suite asks, when the error it got is the way its client or engine
// noticed the deadline first: an etcd server, which gets the deadline with
// the gRPC call, answers with its own timeout; go-redis sets the
// connection's I/O deadline from ctx and reports "i/o timeout". Either can
// arrive before the timer of ctx has run.
func DeadlinePassed(ctx context.Context) bool {
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}
