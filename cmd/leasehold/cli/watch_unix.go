//go:build unix

package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

var sigTERM os.Signal = syscall.SIGTERM

// orphanWait is how long the supervisor waits for its own stop to take
// effect after the command's group stopped: if it has not been stopped and
// continued by then, nobody can stop its job (an orphaned process group
// ignores SIGTSTP), and the command is continued.
const orphanWait = 100 * time.Millisecond

// loop runs until the keeper exits and returns how it ended.
//
// Job control (only when leasehold has a controlling terminal): when the
// command stops (Ctrl-Z, or a read of the terminal from the background), as
// its keeper reports (the keeper does not stop: it goes on enforcing the
// lease's deadline, killing the group at it, stopped or not), leasehold
// takes the terminal back if the group had it and stops its own process
// group with SIGTSTP, so that the shell sees its job stopped. When the
// keeper itself is stopped (SIGSTOP, which it cannot catch) leasehold does
// not stop: nobody else would enforce the deadline while the command runs. A command that ignores SIGTSTP is not
// stopped, so leasehold is not either: it goes on renewing the lease while
// the command runs. When leasehold is continued (fg, bg: SIGCONT), it gives the
// terminal to the command's group if its own group has it and continues
// the group, unless the lease was lost meanwhile: then the group gets
// SIGKILL instead.
func (w *watchdog) loop(ctx context.Context, t *tree, sigs <-chan os.Signal) treeEvent {
	tick := w.timer(checkInterval(w.grace))
	defer func() { tick.Stop() }()
	// The kill time itself is met by a timer, not the next tick (up to
	// 250 ms later): with the keeper stopped nothing else kills on time.
	killAt := w.timer(w.killIn())
	defer func() { killAt.Stop() }()
	rearm := func() {
		killAt.Stop()
		killAt = w.timer(w.killIn())
	}
	var conts chan os.Signal
	if t.tty != nil {
		conts = make(chan os.Signal, 1)
		signal.Notify(conts, syscall.SIGCONT)
		defer signal.Stop(conts)
	}
	var orphan <-chan time.Time
	stopped, keeperStopped := false, false
	resume := func() {
		stopped, orphan = false, nil
		w.check(w.lease.Remaining())
		if w.killSent {
			return
		}
		t.tty.give(t.pgid)
		t.signal(syscall.SIGCONT)
	}
	// stopJob stops our own job after the command's stopped: with
	// SIGTSTP, one an orphaned group discards (and not SIGTTOU, which we
	// ignore, nor SIGTTIN, whose stop the shell would report alike).
	stopJob := func() {
		if t.tty == nil || w.killSent || stopped {
			return
		}
		stopped = true
		t.tty.takeBack(t.pgid)
		_ = unix.Kill(0, syscall.SIGTSTP)
		orphan = time.After(orphanWait)
	}
	done, ctxDone := w.lease.Done(), ctx.Done()
	for {
		select {
		case ev := <-t.events:
			if !ev.stopped {
				return ev
			}
			// The keeper itself was stopped (SIGSTOP): it cannot enforce
			// the deadline now, so this process must not stop. It goes on
			// renewing and, should the lease be lost, kills the group
			// itself (SIGKILL reaches the stopped keeper too).
			if !keeperStopped {
				keeperStopped = true
				fmt.Fprintf(w.stderr, "leasehold: the keeper of the command's process group was stopped (SIGSTOP); leasehold keeps the lease and enforces its deadline itself\n")
			}
		case ev := <-t.jobs:
			if ev.stopped {
				stopJob() // the keeper stays awake and enforces the deadline
			}
		case <-conts:
			resume()
		case <-orphan:
			if stopped {
				resume()
			}
		case sig := <-sigs:
			t.signal(sig)
		case <-ctxDone:
			ctxDone = nil
			t.signal(syscall.SIGTERM)
		case <-done:
			done = nil
			w.onDone(w.lease.Remaining())
		case r := <-w.releases:
			w.releaseEarly(r)
			rearm()
		case <-tick.C():
			tick = w.timer(checkInterval(w.grace))
			w.tick()
			rearm()
		case <-killAt.C():
			w.check(w.lease.Remaining())
			rearm()
		}
	}
}

// treeExitCode is the exit status of the command (128+N if it died from
// signal N), or of its keeper if that died before it could report.
func treeExitCode(rep treeReport, ev treeEvent) int {
	switch {
	case rep.done && rep.signal > 0:
		return 128 + rep.signal
	case rep.done:
		return rep.code
	case ev.status.Signaled():
		return 128 + int(ev.status.Signal())
	case ev.status.Exited():
		return ev.status.ExitStatus()
	}
	return ExitInternal
}

// describeExit says how the command ended, for messages.
func describeExit(rep treeReport, ev treeEvent) string {
	switch {
	case rep.done && rep.signal > 0:
		return "signal: " + syscall.Signal(rep.signal).String()
	case rep.done:
		return fmt.Sprintf("exit status %d", rep.code)
	case rep.pid == 0 && ev.err == nil && ev.status.Signaled():
		// The group (keeper and command) was killed before the keeper
		// reported the command's start: it may have run (a keeper
		// descheduled between starting it and saying so, on a loaded
		// machine; seen in CI under a busy loop).
		return "signal: " + ev.status.Signal().String() + " (the group was killed before its keeper reported whether the command had started)"
	case rep.pid == 0:
		return "did not run"
	case ev.err != nil:
		return ev.err.Error()
	case ev.status.Signaled():
		return "signal: " + ev.status.Signal().String()
	}
	return fmt.Sprintf("its keeper exited with status %d", ev.status.ExitStatus())
}
