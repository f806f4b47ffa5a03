package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
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
// 128+N, as they end a wait. Unless the command makes one attempt
// (--no-wait, -w 0), a store that cannot be opened (it refuses
// connections, does not answer within --connect-timeout, or fails
// otherwise with exit 70) is tried again, after 100ms doubling to 2s,
// saying so once on stderr (and that it answers again once it does):
// with --wait D until D runs out, then the wait gives up (75, or -E's
// code) naming the last error; without --wait as long as it takes, as
// the wait for the lease itself, if it could not be reached (refused,
// no route, no answer within --connect-timeout: exitError.unreachable),
// while other failures (a wrong password, a missing table) end it with
// 70. A usage error (64) ends it at once.
// Red team: a store that refused connections ended -w 6 at once with 70,
// and a stopped one ended -w 30 at the connect timeout; issue 29's red
// team, #2: a lease server that refused connections ended run -w 3, and
// run without -w, at once with 70, while a wait without -w retries a
// store that fails during the wait.
func (o *runOptions) openWaiting(ctx context.Context, e *env, watch []os.Signal, sigs <-chan os.Signal) (leasehold.Store, error) {
	octx, stop := o.openContext(ctx)
	defer stop()
	var last error
	for pause := openRetryFirst; ; pause = min(2*pause, openRetryMax) {
		store, err := e.openStoreOn(octx, o.store, watch)
		if err == nil {
			if last != nil {
				fmt.Fprintf(e.stderr, "leasehold: waiting for %s: the store answers again\n", visible(o.name))
			}
			return store, nil
		}
		var we *waitOpenError
		if errors.As(err, &we) && last != nil {
			return nil, o.openGiveUpAfter(last)
		}
		var ee *exitError
		if o.noWait || !errors.As(err, &ee) || ee.code != ExitInternal || !o.boundedWait() && !ee.unreachable {
			return nil, o.openGiveUp(err)
		}
		if last == nil {
			fmt.Fprintf(e.stderr, "leasehold: waiting for %s: the store cannot be opened (since %s: %s); still trying\n",
				visible(o.name), time.Now().Format(time.TimeOnly), firstLine(ee.msg))
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

// firstLine is msg's first line, at most 400 bytes of it.
func firstLine(msg string) string {
	msg, _, _ = strings.Cut(msg, "\n")
	if len(msg) > 400 {
		msg = msg[:400] + "..."
	}
	return msg
}

// openGiveUpAfter is the give-up of a bounded wait that ran out while the
// store could not be opened, last being the error of the last attempt.
func (o *runOptions) openGiveUpAfter(last error) error {
	o.hurry = true
	return exitf(o.notAcquired, "gave up waiting for %s after %s: the store did not answer or refused connections within the wait (last error: %v); nothing was granted",
		visible(o.name), shortDuration(o.wait), last)
}
