//go:build !unix

package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"
)

var sigTERM = os.Interrupt

// tree runs the command as a plain child process: this platform has no
// process groups to signal and no keeper, so the command's children are not
// stopped with it, and nothing stops it if leasehold dies.
type tree struct {
	cmd    *exec.Cmd
	events chan treeEvent
}

type treeEvent struct {
	state *os.ProcessState
	err   error
}

type treeReport struct {
	leftover, errMsg string
	errCode          int
	deadline         bool
}

type treeSpec struct {
	argv           []string
	env            []string
	stdin          io.Reader
	stdout, stderr io.Writer
	remaining      time.Duration
	foreground     bool
}

func startTree(s treeSpec) (*tree, error) {
	cmd := exec.Command(s.argv[0], s.argv[1:]...)
	cmd.Env, cmd.Stdin, cmd.Stdout, cmd.Stderr = s.env, s.stdin, s.stdout, s.stderr
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return nil, startError(s.argv[0], err)
	}
	t := &tree{cmd: cmd, events: make(chan treeEvent, 1)}
	go func() {
		err := cmd.Wait()
		t.events <- treeEvent{state: cmd.ProcessState, err: err}
	}()
	return t, nil
}

func (t *tree) signal(sig os.Signal) { _ = t.cmd.Process.Signal(sig) }

func (t *tree) setRemaining(time.Duration) {}

func (t *tree) close() {}

func (t *tree) report() treeReport { return treeReport{} }

func (w *watchdog) loop(ctx context.Context, t *tree, sigs <-chan os.Signal) treeEvent {
	tick := w.timer(checkInterval(w.grace))
	defer func() { tick.Stop() }()
	done, ctxDone := w.lease.Done(), ctx.Done()
	for {
		select {
		case ev := <-t.events:
			if ev.state != nil {
				ev.err = nil
			}
			return ev
		case sig := <-sigs:
			t.signal(sig)
		case <-ctxDone:
			ctxDone = nil
			t.signal(os.Kill)
		case <-done:
			done = nil
			w.onDone(w.lease.Remaining())
		case <-tick.C():
			tick = w.timer(checkInterval(w.grace))
			w.tick()
		}
	}
}

func treeExitCode(_ treeReport, ev treeEvent) int {
	if ev.state == nil {
		return ExitInternal
	}
	if c := ev.state.ExitCode(); c >= 0 {
		return c
	}
	return ExitInternal
}

func describeExit(_ treeReport, ev treeEvent) string {
	if ev.state == nil {
		return "did not run"
	}
	return fmt.Sprint(ev.state)
}
