package cli

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/leasehold/leasehold"
)

// The pauses between attempts to open a store during a bounded wait: the
// first, doubled after each attempt up to the longest.
const (
	openRetryFirst = 100 * time.Millisecond
	openRetryMax   = 2 * time.Second
)

// openWaiting opens the store for run, elect and hold. The signals watch
// (those the command handles; their copies arrive on sigs too) end it with
// 128+N, as they end a wait. With a bounded wait (--wait D), a store that
// cannot be opened (it refuses connections, does not answer within
// --connect-timeout, or fails otherwise with exit 70) is tried again,
// after 100ms doubling to 2s, until D runs out: then the wait gives up
// (75, or -E's code) naming the last error. A usage error (64) ends it at
// once, and so does any error without a bounded wait. Red team: a store
// that refused connections ended -w 6 at once with 70, and a stopped one
// ended -w 30 at the connect timeout.
func (o *runOptions) openWaiting(ctx context.Context, e *env, watch []os.Signal, sigs <-chan os.Signal) (leasehold.Store, error) {
	octx, stop := o.openContext(ctx)
	defer stop()
	var last error
	for pause := openRetryFirst; ; pause = min(2*pause, openRetryMax) {
		store, err := e.openStoreOn(octx, o.store, watch)
		if err == nil {
			return store, nil
		}
		var we *waitOpenError
		if errors.As(err, &we) && last != nil {
			return nil, o.openGiveUpAfter(last)
		}
		var ee *exitError
		if !o.boundedWait() || !errors.As(err, &ee) || ee.code != ExitInternal {
			return nil, o.openGiveUp(err)
		}
		last = err
		t := time.NewTimer(pause)
		select {
		case <-t.C:
			continue
		case sig := <-sigs:
			t.Stop()
			o.hurry = true
			return nil, exitf(signalExitCode(sig), "%s while opening the store again (last error: %v)", sig, last)
		case <-octx.Done():
			t.Stop()
		}
		if !errors.Is(context.Cause(octx), errWaitTimeout) {
			return nil, last
		}
		return nil, o.openGiveUpAfter(last)
	}
}

// openGiveUpAfter is the give-up of a bounded wait that ran out while the
// store could not be opened, last being the error of the last attempt.
func (o *runOptions) openGiveUpAfter(last error) error {
	o.hurry = true
	return exitf(o.notAcquired, "gave up waiting for %s after %s: the store did not answer or refused connections within the wait (last error: %v); nothing was granted",
		visible(o.name), shortDuration(o.wait), last)
}
