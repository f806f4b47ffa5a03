package cli

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// minFirstTry is the least time a bounded wait gives opening the store
// and the first attempt together: a wait shorter than a round trip (run
// -w 1ns, issue 31's red team #10) still tries once, as -n does, rather
// than giving up before the store could answer. With abandonGrace and
// closeGrace it keeps the promise that --wait D returns at most 2 s after
// D.
const minFirstTry = 500 * time.Millisecond

// boundedWait reports whether --wait D (D > 0) bounds the wait.
func (o *runOptions) boundedWait() bool { return o.wait > 0 && !o.noWait }

// openContext starts the clock of a bounded wait (run's --wait D counts
// from opening the store) and returns the context that opening the store
// runs in: bounded by the wait (at least minFirstTry), its cause then
// errWaitTimeout. Issue 31's red team #8: `run --wait 2s` on a stopped
// Redis ended after the connect timeout, with 70.
func (o *runOptions) openContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if !o.boundedWait() {
		return ctx, func() {}
	}
	o.waitFrom = time.Now()
	return context.WithDeadlineCause(ctx, o.waitFrom.Add(max(o.wait, minFirstTry)), errWaitTimeout)
}

// waitContexts returns the contexts of the wait for the lease: wctx ends
// when the wait runs out, fctx, which bounds the first attempt, at least
// minFirstTry after the wait began (openContext, else now). Both have
// errWaitTimeout as cause then; without a bounded wait both are ctx. The
// next wait (elect --on-lost restart) counts from its own start.
func (o *runOptions) waitContexts(ctx context.Context) (wctx, fctx context.Context, stop func()) {
	if !o.boundedWait() {
		return ctx, ctx, func() {}
	}
	from := o.waitFrom
	if from.IsZero() {
		from = time.Now()
	}
	o.waitFrom = time.Time{}
	wctx, wstop := context.WithDeadlineCause(ctx, from.Add(o.wait), errWaitTimeout)
	fctx, fstop := context.WithDeadlineCause(ctx, from.Add(max(o.wait, minFirstTry)), errWaitTimeout)
	return wctx, fctx, func() { fstop(); wstop() }
}

// waitOpenError is the error of opening a store that a wait ran out on
// (connect): what names the operation and the store.
type waitOpenError struct {
	what string
	err  error
}

// Error names the store, and the store's error unless it is only the end
// of the wait (a store may word that as its own connect timeout).
func (w *waitOpenError) Error() string {
	if errors.Is(w.err, errStoreStuck) || errors.Is(w.err, context.DeadlineExceeded) {
		return w.what
	}
	return fmt.Sprintf("%s: %v", w.what, w.err)
}

// openGiveUp converts an error of opening the store that a bounded wait
// ran out on into the give-up of the wait (exit 75, or -E's code);
// other errors are returned as they are.
func (o *runOptions) openGiveUp(err error) error {
	var we *waitOpenError
	if !errors.As(err, &we) {
		return err
	}
	o.hurry = true
	return exitf(o.notAcquired, "gave up waiting for %s after %s: the store did not answer within the wait (%s); nothing was granted",
		visible(o.name), shortDuration(o.wait), we)
}

// waitAbandon returns a channel closed abandonGrace after ctx ended
// because a wait ran out (its cause errWaitTimeout), never otherwise: a
// store still opening then is left behind. stop releases its timer.
func waitAbandon(ctx context.Context) (abandon <-chan struct{}, stop func()) {
	ch := make(chan struct{})
	var mu sync.Mutex
	var t *time.Timer
	stopped := false
	stopAfter := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !stopped && errors.Is(context.Cause(ctx), errWaitTimeout) {
			t = time.AfterFunc(abandonGrace, func() { close(ch) })
		}
	})
	return ch, func() {
		stopAfter()
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		if t != nil {
			t.Stop()
		}
	}
}
