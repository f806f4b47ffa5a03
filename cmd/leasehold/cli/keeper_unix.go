//go:build unix

package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leasehold/leasehold/internal/mutation"
)

// The keeper is the leader of the process group a command of "run" and
// "elect" runs in. The supervisor (the leasehold process holding the lease)
// starts it by executing its own binary with keeperEnv set; the keeper
// starts the command in its group and waits for it. It exists so that the
// command's whole process tree dies with the lease even when the supervisor
// cannot act:
//
//   - It reads the control pipe, whose write end only the supervisor holds.
//     End of file means the supervisor is gone (killed, crashed, OOM): the
//     keeper sends SIGKILL to the whole group, itself included.
//   - The supervisor writes every new local deadline of the lease to the
//     pipe, on the host's boot-time and monotonic clocks (absolute readings,
//     the same in every process). When the latest one passes on either
//     clock the keeper sends SIGKILL to the group, so a supervisor that is
//     stopped (SIGSTOP) or starved cannot let the command outlive the lease.
//     It reports "deadline" first: the supervisor then reports the lease
//     lost (76) even if it renewed the lease before it could pass the new
//     deadline on.
//   - When the command exits, the keeper stops whatever it left in the
//     group (SIGTERM, SIGKILL after leftoverGrace) and only then reports the
//     command's exit status on the report pipe and exits; the supervisor
//     releases the lease after that.
//
// The keeper survives the signals sent to the group (it catches them and
// does nothing), except SIGKILL and SIGSTOP. It catches the job-control
// stops (SIGTSTP, SIGTTIN, SIGTTOU) too, so that it keeps enforcing the
// deadline while the command is stopped, or when the command ignores them
// (Ctrl-Z while leasehold itself is stopped): it reports the command's
// stops and continues on the report pipe ("stopped SIG", "continued"), and
// the supervisor stops its own job on that report.

// keeperEnv, set in the environment, makes the leasehold binary (or a test
// binary that calls RunKeeper) a keeper. Its value is keeperProtocol.
const keeperEnv = "LEASEHOLD_KEEPER"

// keeperProtocol names the pipe protocol below (and its version).
const keeperProtocol = "leasehold-keeper/1"

// The keeper's file descriptors (after stdin, stdout and stderr).
const (
	keeperCtlFD    = 3 // read: "d BOOT MONO" deadline lines; EOF: the supervisor is gone
	keeperReportFD = 4 // write: "pid N", "stopped SIG" and "continued", "deadline" (the group is killed at it), then "exit N" or "signal N" (and "left term|kill"), or "error CODE MSG"
)

// leftoverGrace is how long processes the command left in its group get
// between SIGTERM and SIGKILL once the command has exited.
const leftoverGrace = time.Second

// settleTime is how long the keeper lets the rest of the group finish
// dying with the command before it calls what remains left behind.
const settleTime = 50 * time.Millisecond

// keeperTick bounds every wait of the keeper, so that after a suspend (when
// timers stand still) it looks at the boot-time clock within this long.
const keeperTick = 100 * time.Millisecond

// keeperSignals are caught by the keeper so that it survives them when they
// are sent to the group; the command gets their default action (a signal
// that was ignored when leasehold started stays ignored for both).
var keeperSignals = append([]os.Signal{syscall.SIGALRM, syscall.SIGPIPE, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU}, forwardedSignals...)

// KeeperRequested reports whether this process was started by leasehold as
// the keeper of a command's process group; main must then call RunKeeper
// before anything else.
func KeeperRequested() bool { return os.Getenv(keeperEnv) != "" }

// RunKeeper runs the keeper and returns its exit status. Its arguments
// (os.Args[1:]) are the command and its arguments; its environment is the
// command's, plus keeperEnv.
func RunKeeper() int {
	proto := os.Getenv(keeperEnv)
	os.Unsetenv(keeperEnv)
	if proto != keeperProtocol || len(os.Args) < 2 {
		fmt.Fprintf(os.Stderr, "leasehold: %s=%q: not a keeper started by this leasehold\n", keeperEnv, proto)
		return ExitInternal
	}
	if unix.Getpgrp() != os.Getpid() {
		// Signalling "the group" would reach the supervisor's.
		fmt.Fprintln(os.Stderr, "leasehold: keeper: not the leader of a process group of its own")
		return ExitInternal
	}
	syscall.CloseOnExec(keeperCtlFD)
	syscall.CloseOnExec(keeperReportFD)
	becomeSubreaper()
	k := &keeper{
		ctl:     os.NewFile(keeperCtlFD, "leasehold-control"),
		report:  os.NewFile(keeperReportFD, "leasehold-report"),
		pgid:    unix.Getpgrp(),
		group:   !mutation.On("no-group-signal"),
		enforce: !mutation.On("no-death-signal"),
	}
	ignored := make(chan os.Signal, 1) // never read: Notify drops what does not fit
	for _, s := range keeperSignals {
		if !signal.Ignored(s) {
			signal.Notify(ignored, s)
		}
	}
	return k.run(os.Args[1:])
}

type keeper struct {
	ctl, report *os.File
	pgid        int
	group       bool // signal the group (not only the command): off under the no-group-signal mutation
	enforce     bool // act on EOF and deadlines: off under the no-death-signal mutation
	cmdPid      int
}

// startCommand starts argv in the keeper's process group with the
// keeper's stdin, stdout, stderr and environment.
func startCommand(argv []string) (int, error) {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return 0, err
	}
	return syscall.ForkExec(path, argv, &syscall.ProcAttr{Env: os.Environ(), Files: []uintptr{0, 1, 2}})
}

// reapChildren waits for every child of the keeper until it has none
// left, sends the command's status (cmd is its pid) to exited and its
// stops and continues to jobs (as report lines).
func reapChildren(cmd int, exited chan<- syscall.WaitStatus, jobs chan<- string) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WUNTRACED|unix.WCONTINUED, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
		case err != nil:
			return // no children: none can appear any more
		case pid != cmd:
		case ws.Stopped():
			jobs <- fmt.Sprintf("stopped %d", int(ws.StopSignal()))
		case ws.Continued():
			jobs <- "continued"
		default:
			exited <- ws
		}
	}
}

// hostTime is a reading of the host's boot-time and monotonic clocks, or a
// deadline on both.
type hostTime struct{ boot, mono time.Duration }

func hostNow() hostTime { return hostTime{boot: bootClock(), mono: monoClock()} }

// left returns the time from now to d on the earlier of both clocks.
func (d hostTime) left(now hostTime) time.Duration { return min(d.boot-now.boot, d.mono-now.mono) }

func (d hostTime) String() string { return fmt.Sprintf("d %d %d\n", int64(d.boot), int64(d.mono)) }

// parseDeadline parses one control line.
func parseDeadline(line string) (hostTime, error) {
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "d" {
		return hostTime{}, fmt.Errorf("bad control line %q", line)
	}
	b, err1 := strconv.ParseInt(f[1], 10, 64)
	m, err2 := strconv.ParseInt(f[2], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return hostTime{}, fmt.Errorf("bad control line %q: %v", line, err)
	}
	return hostTime{boot: time.Duration(b), mono: time.Duration(m)}, nil
}

// readControl sends each deadline read from r to out and closes out at end
// of file or on any error (both mean: the supervisor is gone).
func readControl(r io.Reader, out chan<- hostTime) {
	defer close(out)
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		d, err := parseDeadline(line)
		if err != nil {
			return
		}
		out <- d
	}
}

func (k *keeper) say(format string, args ...any) {
	_, _ = fmt.Fprintf(k.report, format+"\n", args...)
}

func (k *keeper) run(argv []string) int {
	deadlines := make(chan hostTime)
	go readControl(k.ctl, deadlines)
	// The supervisor wrote the first deadline before starting us.
	latest, ok := <-deadlines
	if !ok {
		if k.enforce {
			// The supervisor is gone: do not start the command.
			fmt.Fprintln(os.Stderr, "leasehold: keeper: no deadline from the supervisor; the command was not started")
			return ExitInternal
		}
		deadlines = nil
	}
	if k.enforce && latest.left(hostNow()) <= 0 {
		k.say("error %d the lease's deadline passed before the command started", ExitLost)
		return ExitLost
	}

	pid, err := startCommand(argv)
	if err != nil {
		var ee *exitError
		errors.As(startError(argv[0], err), &ee)
		k.say("error %d %s", ee.code, ee.msg)
		return ee.code
	}
	k.cmdPid = pid
	k.say("pid %d", pid)
	// Reap the command, and whatever it leaves behind once this process
	// is their subreaper (Linux), so that no zombie stays in the group.
	exited := make(chan syscall.WaitStatus, 1)
	jobs := make(chan string, 16)
	go reapChildren(pid, exited, jobs)
	var ws syscall.WaitStatus

	timer := time.NewTimer(0)
	defer timer.Stop()
	for done := false; !done; {
		select {
		case d, ok := <-deadlines:
			if !ok {
				deadlines = nil
				if k.enforce {
					k.killAll() // the supervisor is gone
				}
				continue
			}
			latest = d
			timer.Reset(0) // an earlier deadline is acted on at once
		case <-timer.C:
			left := latest.left(hostNow())
			if !k.enforce {
				left = keeperTick
			} else if left <= 0 {
				k.killAtDeadline() // the lease's deadline passed unrenewed
			}
			timer.Reset(max(min(left, keeperTick), time.Millisecond))
		case j := <-jobs:
			k.say("%s", j)
		case ws = <-exited:
			done = true
		}
	}

	left, killAfter := "", false
	if k.group {
		left, killAfter = k.stopLeftovers(deadlines, latest)
	}
	if ws.Signaled() {
		k.say("signal %d", int(ws.Signal()))
	} else {
		k.say("exit %d", ws.ExitStatus())
	}
	if left != "" {
		k.say("left %s", left)
	}
	if killAfter {
		k.killAll()
	}
	return 0
}

// killAtDeadline kills the group (killAll) because the latest deadline
// passed, after telling the supervisor so: it may have renewed the lease
// meanwhile (stopped or starved before it passed the new deadline on, or
// confirming the renewal inside the kill margin), and must then still
// report the lease lost, not the command's SIGKILL.
func (k *keeper) killAtDeadline() {
	k.say("deadline")
	k.killAll()
}

// killAll sends SIGKILL to the command's whole process group, the keeper
// included (under the no-group-signal mutation: to the command only).
func (k *keeper) killAll() {
	if !k.group {
		_ = unix.Kill(k.cmdPid, unix.SIGKILL)
		return
	}
	_ = unix.Kill(-k.pgid, unix.SIGKILL)
	os.Exit(ExitLost) // only reached if the keeper left the group already
}

// stopLeftovers stops what the command left in its group after it exited
// and says how: "" (nothing was left), "term" (gone after SIGTERM) or
// "kill". The control pipe is still obeyed: the supervisor's end or the
// deadline sends SIGKILL at once.
//
// On Linux the keeper stays in the group and tells when it is empty from
// /proc, so that a signal to the supervisor's group (kill -9 -PGID,
// timeout -s KILL, kill %1) during this window kills the supervisor and
// not the keeper, which then kills the leftovers (it used to join that
// group, die with it, and leave a leftover that ignores SIGTERM running).
// Elsewhere it moves itself to the supervisor's process group to tell
// (kill(-pgid, 0)); it keeps the group's id from being reused as long as
// it lives, so the signals cannot reach another group. If it cannot leave
// the group (its supervisor is gone, so its group cannot be joined),
// killAfter asks the caller to SIGKILL the group, the keeper included,
// once it has reported the command's status.
func (k *keeper) stopLeftovers(deadlines <-chan hostTime, latest hostTime) (left string, killAfter bool) {
	empty := func() bool {
		others, _ := othersInGroup(k.pgid)
		return !others
	}
	kill := func() { killOthersInGroup(k.pgid) }
	if _, ok := othersInGroup(k.pgid); !ok {
		if err := unix.Setpgid(0, supervisorPgrp()); err != nil {
			return "kill", true
		}
		empty = func() bool { return errors.Is(unix.Kill(-k.pgid, 0), unix.ESRCH) }
		kill = func() { _ = unix.Kill(-k.pgid, unix.SIGKILL) }
	}
	// obey waits up to pause for the control pipe and applies it: its end
	// (the supervisor is gone) or a passed deadline kills the group.
	obey := func(pause time.Duration) {
		select {
		case d, ok := <-deadlines:
			if !ok {
				deadlines = nil
				if k.enforce {
					kill()
					os.Exit(ExitLost)
				}
			} else {
				latest = d
			}
		case <-time.After(pause):
		}
		if k.enforce && latest.left(hostNow()) <= 0 {
			k.say("deadline")
			kill()
		}
	}
	// Processes that were dying with the command (a signal to the group)
	// may not be reaped yet: give them a moment before calling them left.
	for end := time.Now().Add(settleTime); !empty(); obey(5 * time.Millisecond) {
		if time.Now().After(end) {
			break
		}
	}
	if empty() {
		return "", false
	}
	waitEmpty := func(d time.Duration) bool {
		end := time.Now().Add(d)
		for !empty() {
			if time.Now().After(end) {
				return false
			}
			obey(10 * time.Millisecond)
		}
		return true
	}
	_ = unix.Kill(-k.pgid, unix.SIGTERM)
	if waitEmpty(leftoverGrace) {
		return "term", false
	}
	kill()
	waitEmpty(leftoverGrace) // zombies not yet reaped by their new parent
	return "kill", false
}

// supervisorPgrp returns the process group of the keeper's parent.
func supervisorPgrp() int {
	pg, err := unix.Getpgid(os.Getppid())
	if err != nil {
		return -1
	}
	return pg
}
