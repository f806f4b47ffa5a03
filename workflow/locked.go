package workflow

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold"
)

// errRefused carries a refusal out of a locked transaction.
type errRefused struct {
	rec instRec
}

func (errRefused) Error() string { return "refused" }

// precheck reads the instance without a lock: a transition that cannot
// apply (the instance is not in its from-state) is answered from that read,
// without locking anything, since a refusal writes nothing. It reports
// done false when the transition may apply; the decision to apply is then
// made under the lock.
func (w *Workflows) precheck(ctx context.Context, c *command, s Strategy) (Result, bool, error) {
	rec, _, err := w.readInstance(ctx, c.id)
	if err != nil {
		return Result{}, true, err
	}
	if rec.State == c.from {
		return Result{}, false, nil
	}
	res, err := w.refusal(ctx, c, rec, s, 0)
	return res, true, err
}

// pessimistic locks the instance's record for the transition, after its
// turn among this process's transitions of the instance: the turn and the
// lock share one deadline, LockWait from the call's start.
func (w *Workflows) pessimistic(ctx context.Context, c *command) (Result, error) {
	if res, done, err := w.precheck(ctx, c, Pessimistic); done {
		return res, err
	}
	deadline := time.Now().Add(w.cfg.LockWait)
	return w.inTurn(ctx, c, deadline, "record lock", func() (Result, error) { return w.lockedAttempts(ctx, c, deadline) })
}

// lockedAttempts runs the transition in the instance's locked
// transaction, again while a writer that does not lock changes the record
// under it, at most MaxAttempts times, waiting for the lock until
// deadline.
func (w *Workflows) lockedAttempts(ctx context.Context, c *command, deadline time.Time) (Result, error) {
	for attempt := 1; attempt <= w.cfg.MaxAttempts; attempt++ {
		var p *plan
		wait := time.Until(deadline)
		if wait <= 0 {
			return Result{}, w.waitTimeout(c, "record lock", "")
		}
		_, err := w.locker.LockedTxn(ctx, w.instKey(c.id), wait, func(cur leasehold.Versioned, exists bool) (leasehold.Txn, error) {
			if !exists {
				return leasehold.Txn{}, fmt.Errorf("workflow %q instance %q: %w", w.def.Name, c.id, ErrNoInstance)
			}
			rec, err := decodeInstance(cur.Value)
			if err != nil {
				return leasehold.Txn{}, err
			}
			if rec.State != c.from {
				return leasehold.Txn{}, errRefused{rec}
			}
			p = w.planOne(c, rec, cur.Version, Pessimistic, 0)
			return w.txn(p)
		})
		var ref errRefused
		if errors.As(err, &ref) {
			return w.refusal(ctx, c, ref.rec, Pessimistic, attempt-1)
		}
		if errors.Is(err, leasehold.ErrLockTimeout) {
			return Result{}, w.waitTimeout(c, "record lock", "")
		}
		kind, _ := w.classify(c.id, err)
		if res, done, err := w.outcome(ctx, c, p, kind, err, Pessimistic, attempt); done {
			return res, err
		}
		w.m.conflict() // a writer that does not lock changed the record: try again
	}
	return Result{}, &leasehold.RetriesExhaustedError{Key: w.instKey(c.id), Attempts: w.cfg.MaxAttempts}
}

// waitTimeoutError is a transition's wait for its turn, row lock or lease
// that passed LockWait (the whole call's: the turn and the lock or lease
// share it). It matches leasehold.ErrLockTimeout.
type waitTimeoutError struct {
	what   string // "record lock", "lease \"...\""
	waited time.Duration
	where  string // "" or " behind this process's other transitions"
}

func (e *waitTimeoutError) Error() string {
	return fmt.Sprintf("%s not granted in time (waited %s%s)", e.what, e.waited, e.where)
}

func (e *waitTimeoutError) Is(target error) bool { return target == leasehold.ErrLockTimeout }

// waitTimeout is the error of c's wait for what (its turn among this
// process's transitions if where says so) that passed LockWait.
func (w *Workflows) waitTimeout(c *command, what, where string) error {
	return fmt.Errorf("workflow %q instance %q: %w", w.def.Name, c.id, &waitTimeoutError{what: what, waited: w.cfg.LockWait, where: where})
}

// behindOthers says a wait timed out while waiting for a turn.
const behindOthers = " behind this process's other transitions"

// waitTurn takes c's turn on h (turns.go), waiting until deadline: past
// it, an error matching leasehold.ErrLockTimeout that names what the
// turn was to lead to; ctx's error if ctx ends first.
func (w *Workflows) waitTurn(ctx context.Context, h *hotInstance, c *command, deadline time.Time, what string) (*turn, error) {
	tctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	t, err := w.takeTurn(tctx, h, c)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, w.waitTimeout(c, what, behindOthers)
	}
	return t, nil
}

// optimisticTurn is the Optimistic strategy: the optimistic transaction,
// retried on conflicts (with other processes: this process's callers of
// the instance take turns, so they do not conflict with each other).
func (w *Workflows) optimisticTurn(ctx context.Context, c *command) (Result, error) {
	return w.inTurn(ctx, c, time.Now().Add(w.cfg.LockWait), "turn", func() (Result, error) { return w.optimistic(ctx, c, Optimistic, 0, nil) })
}

// inTurn runs step in c's turn among this process's transitions of the
// instance (waitTurn). The turn passes when step returns, or earlier when
// a refusal starts (c.passTurn): a refusal needs no turn, and the
// pessimistic one is answered after the row lock is let go.
func (w *Workflows) inTurn(ctx context.Context, c *command, deadline time.Time, what string, step func() (Result, error)) (res Result, err error) {
	h := w.acquireHot(c.id)
	defer w.releaseHot(h)
	t, err := w.waitTurn(ctx, h, c, deadline, what)
	if err != nil {
		return Result{}, err
	}
	defer func() { t.done(final(res, err)) }()
	c.passTurn = func() { t.done(false) }
	return step()
}

// leased holds a lease on the instance for the transition; the write is
// still conditioned on the version read under it (so writers that bypass
// the lease cannot be overwritten), and the entry records the token.
//
// Transitions of one instance in this process first take turns (turns.go,
// in the order their request ids first arrived): only the one whose turn
// it is asks the store for the lease, instead of every waiter polling it. A transition that cannot
// apply (the instance is not in its from-state) is refused from a read,
// before the gate and again after it, without taking the lease.
func (w *Workflows) leased(ctx context.Context, c *command, s Strategy) (res Result, err error) {
	actx, cancel := context.WithTimeout(ctx, w.cfg.LockWait)
	defer cancel()
	h := w.acquireHot(c.id)
	defer w.releaseHot(h)
	if res, done, err := w.precheck(ctx, c, s); done {
		return res, err
	}
	name := w.leaseName(c.id)
	what := fmt.Sprintf("lease %q", name)
	t, err := w.takeTurn(actx, h, c)
	if err != nil {
		if ctx.Err() == nil {
			return Result{}, w.waitTimeout(c, what, behindOthers)
		}
		return Result{}, ctx.Err()
	}
	defer func() { t.done(final(res, err)) }()
	// Others of this process may have moved it while this one waited.
	c.passTurn = func() { t.done(false) }
	if res, done, err := w.precheck(ctx, c, s); done {
		return res, err
	}
	c.passTurn = nil // refusals from here on are made under the lease: keep the turn until it is released
	// The acquire's request id is the transition's: if this process asks
	// again for the same request, a grant it never heard of is its own.
	l, err := w.client.Acquire(actx, name, leasehold.TTL(w.cfg.LeaseTTL), leasehold.NoKeepalive(), leasehold.RequestID(c.requestID))
	if err != nil {
		if actx.Err() != nil || !definiteRefusal(err) {
			// The call gave up (ctx or LockWait), or failed in a way
			// that does not say nothing was granted (a lost
			// connection): an attempt may have been granted. Release
			// such a grant now rather than leave the instance locked
			// for the lease's TTL.
			w.releaseUnheard(ctx, name, c.requestID)
		}
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return Result{}, w.waitTimeout(c, what, "")
		}
		return Result{}, err
	}
	defer func() {
		w.releaseRetrying(ctx, func(rctx context.Context) error { return l.Release(rctx) })
	}()
	lctx, lcancel := l.Context(ctx)
	defer lcancel()
	res, err = w.optimistic(lctx, c, s, l.Token(), nil)
	if err != nil && lctx.Err() != nil && ctx.Err() == nil {
		return Result{}, fmt.Errorf("workflow %q instance %q: %w", w.def.Name, c.id, l.Err())
	}
	return res, err
}

// definiteRefusal reports whether an error of the store says for certain
// that it granted nothing: an invalid argument, a closed store, a lease
// held by someone else. Anything else (a lost connection, a server
// shutting down) may have come after a grant was made.
func definiteRefusal(err error) bool {
	var held *leasehold.HeldError
	return errors.Is(err, leasehold.ErrInvalid) || errors.Is(err, leasehold.ErrClosed) ||
		errors.Is(err, leasehold.ErrHeld) || errors.As(err, &held) || errors.Is(err, leasehold.ErrNotHeld)
}

// releaseUnheard releases a grant of the lease name that an acquire with
// requestID may have received without its reply reaching us (the caller's
// context ended meanwhile, or the store's connection was lost). The store
// hands a grant back to the same owner asking with the same request id, so
// a try-acquire with that id either returns that grant (or a fresh one,
// the lease being free), which is released at once, or finds the lease
// held by someone else, which is then not ours.
func (w *Workflows) releaseUnheard(ctx context.Context, name, requestID string) {
	w.releaseRetrying(ctx, func(rctx context.Context) error {
		l, err := w.client.TryAcquire(rctx, name, leasehold.TTL(w.cfg.LeaseTTL), leasehold.NoKeepalive(), leasehold.RequestID(requestID))
		if err != nil {
			return err
		}
		return l.Release(rctx)
	})
}

// releaseBound bounds how long a release that cannot reach the store
// (restarting, failing over) is tried again in the background.
const releaseBound = 15 * time.Second

// releaseRetrying lets a lease go: release once, on its own short deadline
// (the caller's may have passed); if that fails in a way that does not
// settle it (the store unreachable), again in the background, with
// backoff, for at most releaseBound, so that a restart of the store does
// not leave the instance locked for the lease's whole TTL. Past the bound,
// the grant expires after its TTL.
func (w *Workflows) releaseRetrying(ctx context.Context, release func(context.Context) error) {
	try := func() bool {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(w.cfg.LockWait, 5*time.Second)+time.Second)
		defer cancel()
		err := release(rctx)
		return err == nil || definiteRefusal(err) || errors.Is(err, leasehold.ErrReleased) || errors.Is(err, leasehold.ErrLost)
	}
	if try() {
		return
	}
	go func() {
		deadline := time.Now().Add(releaseBound)
		for d := 50 * time.Millisecond; time.Now().Before(deadline); d = min(2*d, time.Second) {
			time.Sleep(d)
			if try() {
				return
			}
		}
	}()
}
