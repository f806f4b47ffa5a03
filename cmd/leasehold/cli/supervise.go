package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
)

// releaseTimeout bounds the release of the lease after the command exits.
const releaseTimeout = 5 * time.Second

// supervise runs the command in a process group of its own while the lease
// is held, forwards signals to the group, stops the group if the lease is
// lost, and releases the lease once nothing of the group is left. The
// returned error carries the exit code.
func (o *runOptions) supervise(ctx context.Context, e *env, lease *leasehold.Lease, sigs <-chan os.Signal) error {
	token := strconv.FormatUint(lease.Token(), 10)
	env := append(os.Environ(),
		"LEASEHOLD_NAME="+o.name,
		"LEASEHOLD_OWNER="+lease.Owner(),
		"LEASEHOLD_TOKEN="+token)
	if o.permits > 0 {
		env = append(env, "LEASEHOLD_PERMIT="+lease.Name())
	}
	if o.elect {
		env = append(env, "LEASEHOLD_TERM="+token)
	}
	if o.secret != "" {
		env = append(env, envSecret+"="+o.secret)
	}
	// The command may release its lease early (control.go); without the
	// socket, such a release is found at the next renewal, as a loss.
	var releases <-chan releaseRequest
	if ctl, err := startControl(); err == nil {
		defer ctl.close()
		env = append(env, envControl+"="+ctl.path())
		releases = ctl.reqs
	} else {
		fmt.Fprintf(e.stderr, "leasehold: %s: no control socket (%v): a release from the command will be seen at the next renewal, as a loss\n", o.verb, err)
	}
	t, err := startTree(treeSpec{
		argv: o.command, env: env,
		stdin: e.stdin, stdout: e.stdout, stderr: e.stderr,
		foreground: true, // the first deadline comes from the watchdog below
	})
	if err != nil {
		if rerr := releaseLease(lease); rerr != nil {
			fmt.Fprintf(e.stderr, "leasehold: %v\n", rerr)
		}
		var ee *exitError
		if errors.As(err, &ee) {
			return err
		}
		return exitf(ExitInternal, "%s: %v", o.verb, err)
	}

	w := &watchdog{lease: lease, grace: o.grace, margin: killMargin(o.ttl), tree: t, stderr: e.stderr, name: o.name, releases: releases, clock: e.clock}
	// The keeper waits for its first deadline before it starts the
	// command: sentDeadline is still zero, so this always sends it.
	w.passDeadline()
	ev := w.loop(ctx, t, sigs)
	// Whether the lease was still held when the command was found dead: if
	// this process was stopped past the deadline, the keeper killed the
	// group there, and releasing may still succeed on some stores.
	// The kill time (the deadline less the kill margin) counts: the keeper
	// killed the group there, possibly while this process was stopped.
	expired := !w.released && (!lease.Held() || lease.Remaining() <= w.margin)
	t.close()
	rep := t.report()

	// The keeper says when it killed the group at the latest deadline it
	// was given: the lease may have been renewed since (this process was
	// stopped or starved before it passed the new deadline on, or the
	// renewal was confirmed inside the kill margin), but the command did
	// not get its renewal in time, and was killed for that.
	lost := w.lost
	if lost == nil && !w.released && (expired || rep.deadline) {
		lost = lease.Err()
		switch {
		case lost != nil:
		case rep.deadline:
			lost = errors.New("the command's keeper killed its group at the kill time (the lease's local deadline less the kill margin) of the latest deadline it was given: no renewal reached it in time")
		default:
			lost = errors.New("the lease's kill time (its local deadline less the kill margin) passed before the command's end was seen")
		}
	}
	if lost == nil && errors.Is(lease.Err(), leasehold.ErrLost) {
		lost = lease.Err()
	}
	var relErr error
	switch {
	case w.released: // by the command, early
	case lost != nil:
		releaseLost(lease)
	default:
		relErr = releaseLease(lease)
	}
	if lost == nil && errors.Is(relErr, leasehold.ErrLost) {
		lost = relErr
	}
	if rep.leftover != "" && ev.err == nil {
		sig := "SIGTERM"
		if rep.leftover == "kill" {
			sig = "SIGTERM and SIGKILL"
		}
		fmt.Fprintf(e.stderr, "leasehold: the command left processes in its group; stopped them with %s\n", sig)
	}
	if rep.errCode != 0 && lost == nil {
		if relErr != nil {
			fmt.Fprintf(e.stderr, "leasehold: %v\n", relErr)
		}
		return exitf(rep.errCode, "%s", rep.errMsg)
	}
	if lost != nil {
		return exitf(ExitLost, "lease %s lost: %v (command: %s)", visible(o.name), lost, describeExit(rep, ev))
	}
	if relErr != nil {
		fmt.Fprintf(e.stderr, "leasehold: %v (the lease expires within %s)\n", relErr, lease.TTL())
	}
	if ev.err != nil {
		return exitf(ExitInternal, "%s: wait for the command: %v", o.verb, ev.err)
	}
	if code := treeExitCode(rep, ev); code != 0 {
		return &exitError{code: code}
	}
	return nil
}

// releaseLease releases l, giving up after releaseTimeout.
func releaseLease(l *leasehold.Lease) error {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	return l.Release(ctx)
}

// lostReleaseTimeout bounds the release of a lease already known lost: it
// can free nothing of another holder's (the release is owner-checked),
// and the loss must be reported at once, not after a hung store's 5 s
// (issue 25's review: hold exited 76 about 5.9 s after its deadline).
const lostReleaseTimeout = 300 * time.Millisecond

// releaseLost releases a lease already known lost, briefly.
func releaseLost(l *leasehold.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), lostReleaseTimeout)
	defer cancel()
	_ = l.Release(ctx)
}

// commandTree is what the watchdog needs of the command's process group.
type commandTree interface {
	// signal sends sig to every process of the group.
	signal(sig os.Signal)
	// setRemaining tells the group's keeper the lease's time left: it
	// kills the group by itself once that passes without a newer one.
	setRemaining(d time.Duration)
}

// remainingSetter is a commandTree that reads its clocks before it asks
// remaining for the time left, so that any delay between the two makes
// the deadline it passes on earlier, never later (tree on unix).
type remainingSetter interface {
	setRemainingOf(remaining func() time.Duration)
}

// minCommandTTL is the shortest --ttl of run and elect: the command must
// have time to start, and its group is killed killMargin before the
// lease's local deadline.
const minCommandTTL = 500 * time.Millisecond

// killMargin is how long before the lease's local deadline the command's
// group is sent SIGKILL (by the watchdog and by the keeper): max(50ms, 5 %
// of TTL). The local deadline itself lies TTL*ρ + ε before the store's
// expiry (1 % + 5 ms by default); on a starved machine a SIGKILL sent "at
// the deadline" can land tens of milliseconds late (R13 saw an overlap of
// about 30 ms at TTL 1s and load 16 on 2 cores), so the kill is planned
// this much earlier.
func killMargin(ttl time.Duration) time.Duration {
	return max(50*time.Millisecond, ttl/20)
}

// watchdog enforces the lease on the running command's process group.
//
// The rules: if no renewal has been confirmed by grace before the lease's
// local deadline (checked on both the monotonic and the boot-time clock:
// Lease.Remaining), the group gets SIGTERM, and SIGKILL if it still runs
// margin before the deadline. If the lease is lost (Done closes with
// ErrLost) before that window, because the store refused a renewal, the
// group gets SIGTERM at once and SIGKILL min(grace, time left to the
// deadline - margin) later. If it is lost after the SIGTERM of the window,
// or less than margin is left, SIGKILL follows at once. Every new deadline
// is passed on to the group's keeper, less margin, which enforces it too
// (if this process is stopped or dies).
type watchdog struct {
	lease  *leasehold.Lease
	grace  time.Duration
	margin time.Duration // killMargin(TTL); zero in tests of the bare rules
	tree   commandTree
	stderr io.Writer
	name   string
	// clock times the checks and the kill time: the lease's clock (nil:
	// the real one).
	clock clock.Clock

	termSent, killSent bool
	capped             bool          // the keeper was given the planned SIGKILL after a refusal: no later deadline
	killBelow          time.Duration // SIGKILL once Remaining is at most this (after a refusal)
	sentDeadline       time.Time     // the lease's deadline last passed to the keeper
	lost               error         // why the command was terminated
	// releases are the command's requests to release the lease early
	// (control.go); released says it was, and nothing is enforced since.
	releases <-chan releaseRequest
	released bool
}

// noDeadline is the time left the keeper is given once the command
// released the lease early: none that could pass.
const noDeadline = 100 * 365 * 24 * time.Hour

// releaseEarly releases the lease at the command's request: from then on
// nothing is enforced (no SIGTERM, no SIGKILL at a deadline, the keeper is
// given none), and the command goes on without the lease. A lease found
// lost by the release is handled as a loss.
func (w *watchdog) releaseEarly(r releaseRequest) {
	l := w.lease
	switch {
	case r.Name != l.Name() || r.Owner != l.Owner() || r.Token != l.Token():
		r.reply <- fmt.Errorf("%w: this run holds %s as %s with token %d", leasehold.ErrNotHeld, l.Name(), l.Owner(), l.Token())
		return
	case w.released:
		r.reply <- nil
		return
	case w.termSent:
		r.reply <- fmt.Errorf("%w: the lease was already lost (%v); the command is being stopped", leasehold.ErrNotHeld, w.lost)
		return
	}
	left := l.Remaining()
	err := releaseLease(l)
	if errors.Is(err, leasehold.ErrLost) {
		w.lose(err, left)
		r.reply <- fmt.Errorf("%w: %v", leasehold.ErrNotHeld, err)
		return
	}
	// Released, or not known to be (a store error): either way the
	// keepalive has stopped and the lease is the command's no more.
	w.released = true
	w.sendRemaining(func() time.Duration { return noDeadline })
	fmt.Fprintf(w.stderr, "leasehold: the command released %s (token %d) early; it goes on without the lease\n", l.Name(), l.Token())
	if err != nil {
		err = fmt.Errorf("%v (the lease is no longer renewed and expires within %s)", err, l.TTL())
	}
	r.reply <- err
}

// timer returns a timer of the watchdog's clock that fires after d.
func (w *watchdog) timer(d time.Duration) clock.Timer {
	if w.clock == nil {
		return clock.Real().NewTimer(d)
	}
	return w.clock.NewTimer(d)
}

// checkInterval is how often the watchdog compares the clock with the
// lease's deadline.
func checkInterval(grace time.Duration) time.Duration {
	return max(min(grace/4, 250*time.Millisecond), time.Millisecond)
}

// tick is the watchdog's periodic work: pass a moved deadline on to the
// keeper, then apply the grace window and the deadline to the time left on
// the earlier of the monotonic and the boot-time clock, so that a command
// that was suspended with the machine is stopped as soon as it resumes
// past the lease's deadline.
func (w *watchdog) tick() {
	w.passDeadline()
	w.check(w.lease.Remaining())
}

// check applies the grace window and the deadline, with left the lease's
// time left (Lease.Remaining).
func (w *watchdog) check(left time.Duration) {
	if w.killSent || w.released {
		return
	}
	if !w.termSent {
		if left > w.grace {
			return
		}
		w.lost = fmt.Errorf("no renewal confirmed %s before the lease's local deadline", shortDuration(w.grace))
		w.term(fmt.Sprintf("no renewal of %s confirmed, deadline in %s", w.name, roundDuration(max(left, 0))))
	}
	if left <= max(w.killBelow, w.margin) {
		w.kill("still running at the lease's deadline")
	}
}

// onDone reacts to the lease's Done channel closing, with left the lease's
// time left.
func (w *watchdog) onDone(left time.Duration) {
	err := w.lease.Err()
	if !errors.Is(err, leasehold.ErrLost) || w.killSent || w.released {
		return
	}
	w.lose(err, left)
}

// lose stops the command for the loss err of the lease, with left the
// lease's time left.
func (w *watchdog) lose(err error, left time.Duration) {
	w.lost = err
	switch {
	case w.termSent:
		w.kill("lease lost after SIGTERM")
	case left <= w.margin:
		w.kill("lease lost at its deadline")
	default:
		w.term(fmt.Sprintf("lease %s lost: %v", w.name, err))
		w.killBelow = max(left-w.grace, 0)
		// The keeper kills the group too, should this process be stopped
		// from now on: a grace after the planned SIGKILL (so that it
		// backs this process up rather than races it), never after the
		// lease's deadline.
		w.capped = true
		w.sendRemaining(func() time.Duration { return min(2*w.grace, w.remaining()) })
	}
}

// passDeadline gives the keeper the lease's deadline if it moved. The
// deadline is read first: a renewal after it is passed on at the next tick.
func (w *watchdog) passDeadline() {
	if d := w.lease.Deadline(); !d.Equal(w.sentDeadline) && !w.capped && !w.released {
		w.sentDeadline = d
		w.sendRemaining(w.remaining)
	}
}

// killIn is how long until check would send SIGKILL (at least 1 ms; an
// hour once it has).
func (w *watchdog) killIn() time.Duration {
	if w.killSent || w.released {
		return time.Hour
	}
	return max(w.lease.Remaining()-max(w.killBelow, w.margin), time.Millisecond)
}

// remaining is the time left until the group must be dead: the lease's
// time left less the kill margin.
func (w *watchdog) remaining() time.Duration {
	return w.lease.Remaining() - w.margin
}

// sendRemaining passes the time left that remaining returns on to the
// keeper, measured from a reading of the clocks taken before it is called
// where the tree can do so.
func (w *watchdog) sendRemaining(remaining func() time.Duration) {
	if rs, ok := w.tree.(remainingSetter); ok {
		rs.setRemainingOf(remaining)
		return
	}
	w.tree.setRemaining(remaining())
}

func (w *watchdog) term(why string) {
	w.termSent = true
	fmt.Fprintf(w.stderr, "leasehold: %s: sending SIGTERM to the command's process group\n", why)
	w.tree.signal(sigTERM)
}

func (w *watchdog) kill(why string) {
	w.termSent, w.killSent = true, true
	fmt.Fprintf(w.stderr, "leasehold: %s: sending SIGKILL to the command's process group\n", why)
	w.tree.signal(os.Kill)
}
