package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/leasehold/leasehold"
)

// releaseTimeout bounds the release of the lease after the command exits.
const releaseTimeout = 5 * time.Second

// supervise runs the command while the lease is held, forwards signals to
// it, terminates it if the lease is lost, and releases the lease when it
// exits. The returned error carries the exit code.
func (o *runOptions) supervise(ctx context.Context, e *env, lease *leasehold.Lease, sigs <-chan os.Signal) error {
	cmd := exec.Command(o.command[0], o.command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = e.stdin, e.stdout, e.stderr
	token := strconv.FormatUint(lease.Token(), 10)
	cmd.Env = append(os.Environ(),
		"LEASEHOLD_NAME="+o.name,
		"LEASEHOLD_OWNER="+lease.Owner(),
		"LEASEHOLD_TOKEN="+token)
	if o.permits > 0 {
		cmd.Env = append(cmd.Env, "LEASEHOLD_PERMIT="+lease.Name())
	}
	if o.elect {
		cmd.Env = append(cmd.Env, "LEASEHOLD_TERM="+token)
	}
	// Only matters when stdout or stderr is not a file (tests): do not wait
	// for a background grandchild that keeps the pipe open.
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		if rerr := releaseLease(lease); rerr != nil {
			fmt.Fprintf(e.stderr, "leasehold: %v\n", rerr)
		}
		return startError(o.command[0], err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	w := &watchdog{lease: lease, grace: o.grace, proc: cmd.Process, stderr: e.stderr, name: o.name}
	waitErr := w.loop(ctx, waited, sigs)

	lost := w.lost
	if lost == nil && errors.Is(lease.Err(), leasehold.ErrLost) {
		lost = lease.Err()
	}
	relErr := releaseLease(lease)
	if lost == nil && errors.Is(relErr, leasehold.ErrLost) {
		lost = relErr
	}
	ps := cmd.ProcessState
	if lost != nil {
		status := "did not run"
		if ps != nil {
			status = ps.String()
		}
		return exitf(ExitLost, "lease %s lost: %v (command: %s)", o.name, lost, status)
	}
	if relErr != nil {
		fmt.Fprintf(e.stderr, "leasehold: %v (the lease expires within %s)\n", relErr, lease.TTL())
	}
	if ps == nil {
		return exitf(ExitInternal, "run: wait for command: %v", waitErr)
	}
	if code := exitCode(ps); code != 0 {
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

// watchdog enforces the lease on the running command.
//
// The rules: if no renewal has been confirmed by grace before the lease's
// local deadline (Lease.Deadline, which moves forward with each confirmed
// renewal), the command gets SIGTERM, and SIGKILL if it still runs at the
// deadline. If the lease is lost (Done closes with ErrLost) before that
// window, because the store refused a renewal, the command gets SIGTERM at
// once and SIGKILL min(grace, time left to the deadline) later. If it is
// lost after the SIGTERM of the window, or the deadline has passed, SIGKILL
// follows at once.
type watchdog struct {
	lease  *leasehold.Lease
	grace  time.Duration
	proc   *os.Process
	stderr io.Writer
	name   string

	termSent, killSent bool
	killAt             time.Time // SIGKILL time after a refusal; zero: the deadline
	lost               error     // why the command was terminated
}

// checkInterval is how often the watchdog compares the clock with the
// lease's deadline.
func checkInterval(grace time.Duration) time.Duration {
	return max(min(grace/4, 250*time.Millisecond), time.Millisecond)
}

// loop runs until the command exits and returns cmd.Wait's error.
func (w *watchdog) loop(ctx context.Context, waited <-chan error, sigs <-chan os.Signal) error {
	t := time.NewTicker(checkInterval(w.grace))
	defer t.Stop()
	done, ctxDone := w.lease.Done(), ctx.Done()
	for {
		select {
		case err := <-waited:
			return err
		case sig := <-sigs:
			if !deliveredByTerminal(sig) {
				_ = w.proc.Signal(sig)
			}
		case <-ctxDone:
			ctxDone = nil
			_ = w.proc.Signal(syscall.SIGTERM)
		case <-done:
			done = nil
			w.onDone(time.Now())
		case now := <-t.C:
			w.check(now)
		}
	}
}

// check applies the grace window and the deadline at time now.
func (w *watchdog) check(now time.Time) {
	if w.killSent {
		return
	}
	deadline := w.lease.Deadline()
	if !w.termSent {
		if now.Before(deadline.Add(-w.grace)) {
			return
		}
		w.lost = fmt.Errorf("no renewal confirmed %s before the lease's local deadline", w.grace)
		w.term(fmt.Sprintf("no renewal of %s confirmed, deadline in %s", w.name, roundDuration(deadline.Sub(now))))
	}
	killAt := w.killAt
	if killAt.IsZero() {
		killAt = deadline
	}
	if !now.Before(killAt) {
		w.kill("still running at the lease's deadline")
	}
}

// onDone reacts to the lease's Done channel closing at time now.
func (w *watchdog) onDone(now time.Time) {
	err := w.lease.Err()
	if !errors.Is(err, leasehold.ErrLost) || w.killSent {
		return
	}
	w.lost = err
	left := w.lease.Deadline().Sub(now)
	switch {
	case w.termSent:
		w.kill("lease lost after SIGTERM")
	case left <= 0:
		w.kill("lease lost at its deadline")
	default:
		w.term(fmt.Sprintf("lease %s lost: %v", w.name, err))
		w.killAt = now.Add(min(w.grace, left))
	}
}

func (w *watchdog) term(why string) {
	w.termSent = true
	fmt.Fprintf(w.stderr, "leasehold: %s: sending SIGTERM to the command\n", why)
	_ = w.proc.Signal(syscall.SIGTERM)
}

func (w *watchdog) kill(why string) {
	w.termSent, w.killSent = true, true
	fmt.Fprintf(w.stderr, "leasehold: %s: sending SIGKILL to the command\n", why)
	_ = w.proc.Kill()
}
