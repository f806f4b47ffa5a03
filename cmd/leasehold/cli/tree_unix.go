//go:build unix

package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leasehold/leasehold/internal/mutation"
)

// tree is the supervisor's handle on a command's process group: the keeper
// (its leader, see keeper_unix.go), the command and whatever they start in
// the group.
type tree struct {
	pgid  int       // the keeper's pid, the group's id
	ctl   *os.File  // write end of the control pipe: deadlines; closing it kills the group
	tty   *terminal // non-nil when we have a controlling terminal
	group bool      // signal the group, not only the command (off under the no-group-signal mutation)

	events     chan treeEvent // from the waiter: the keeper stopped or exited
	jobs       chan treeEvent // from the report: the command stopped or continued
	dl         chan hostTime  // the latest deadline not yet written
	stop       chan struct{}  // stops the deadline writer
	wg         sync.WaitGroup // the deadline writer and the report reader
	copies     sync.WaitGroup // copiers of stdio that are not files
	closeAfter []*os.File     // the child's ends of the stdio pipes
	ours       []*os.File     // our ends of them, closed by close

	mu  sync.Mutex
	rep treeReport
}

// treeEvent is a change of the keeper's state, or (on jobs) of the
// command's as the keeper reported it.
type treeEvent struct {
	stopped   bool               // it stopped (Ctrl-Z); else it exited
	continued bool               // (jobs) the command was continued
	status    syscall.WaitStatus // the keeper's status
	sig       syscall.Signal     // (jobs) the signal that stopped the command
	err       error              // waiting failed
}

// treeReport is what the keeper reported.
type treeReport struct {
	pid      int    // the command's pid, 0 if not started
	done     bool   // the command's fate is known
	signal   int    // it died from this signal, or
	code     int    // it exited with this code
	errCode  int    // the command could not be started: 126, 127, ...
	errMsg   string // and why
	leftover string // "", "term" or "kill": what it left in the group was stopped so
	deadline bool   // the keeper killed the group (or the leftovers) at the latest deadline it was given
}

// treeSpec is what startTree needs.
type treeSpec struct {
	argv           []string
	env            []string
	stdin          io.Reader
	stdout, stderr io.Writer
	remaining      time.Duration // time left on the lease
	foreground     bool          // try to give the group the terminal
}

// startTree starts the keeper, which starts the command, in a new process
// group, the terminal's foreground group if ours is.
func startTree(s treeSpec) (*tree, error) {
	exe, err := keeperExecutable()
	if err != nil {
		return nil, err
	}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		ctlW.Close()
		return nil, err
	}
	t := &tree{
		ctl: ctlW, group: !mutation.On("no-group-signal"),
		events: make(chan treeEvent, 4), jobs: make(chan treeEvent, 8), dl: make(chan hostTime, 1), stop: make(chan struct{}),
	}
	fail := func(err error) (*tree, error) {
		ctlR.Close()
		ctlW.Close()
		repR.Close()
		repW.Close()
		t.closeStdio()
		for _, f := range t.ours {
			f.Close()
		}
		return nil, err
	}
	// The keeper waits for the first deadline before it starts the
	// command: the supervisor sends it with setRemainingOf (or, if given
	// here, it waits in the pipe).
	if s.remaining > 0 {
		if _, err := io.WriteString(ctlW, deadlineIn(s.remaining).String()); err != nil {
			return fail(err)
		}
	}
	stdin, err := t.inFile(s.stdin)
	if err != nil {
		return fail(err)
	}
	stdout, err := t.outFile(s.stdout)
	if err != nil {
		return fail(err)
	}
	stderr, err := t.outFile(s.stderr)
	if err != nil {
		return fail(err)
	}
	files := []*os.File{stdin, stdout, stderr, ctlR, repW}
	sys := &syscall.SysProcAttr{Setpgid: true}
	if s.foreground {
		t.tty = openTerminal()
	}
	if t.tty != nil && t.tty.ours() {
		// For Foreground, Ctty is a descriptor of this process.
		sys.Foreground, sys.Ctty = true, int(t.tty.f.Fd())
	}
	fds := make([]uintptr, len(files))
	for i, f := range files {
		fds[i] = f.Fd()
	}
	env := make([]string, 0, len(s.env)+1)
	for _, kv := range s.env {
		if !strings.HasPrefix(kv, keeperEnv+"=") {
			env = append(env, kv)
		}
	}
	attr := &syscall.ProcAttr{Env: append(env, keeperEnv+"="+keeperProtocol), Files: fds, Sys: sys}
	argv := append([]string{"leasehold-keeper"}, s.argv...)
	pid, err := syscall.ForkExec(exe, argv, attr)
	if err != nil && sys.Foreground {
		// The terminal could not be handed over: run in the background
		// group, signals are forwarded anyway.
		sys.Foreground = false
		pid, err = syscall.ForkExec(exe, argv, attr)
	}
	runtime.KeepAlive(files)
	runtime.KeepAlive(t.tty)
	if err != nil {
		if t.tty != nil {
			t.tty.f.Close()
		}
		return fail(fmt.Errorf("start the command's keeper %s: %w", exe, err))
	}
	t.pgid = pid
	ctlR.Close()
	repW.Close()
	t.closeStdio()
	if t.tty != nil {
		t.tty.ignoreTTOU()
	}
	t.wg.Add(2)
	go t.readReport(repR)
	go t.writeDeadlines()
	go t.wait()
	return t, nil
}

// keeperExecutable is the binary to run as the keeper: our own.
func keeperExecutable() (string, error) {
	if runtime.GOOS == "linux" {
		return "/proc/self/exe", nil // still ours if the file was replaced
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find leasehold's own binary for the command's keeper: %w", err)
	}
	return exe, nil
}

// deadlineIn returns the host time d from now.
func deadlineIn(d time.Duration) hostTime {
	now := hostNow()
	return hostTime{boot: now.boot + d, mono: now.mono + d}
}

// inFile returns r as a file for the child: itself, /dev/null for nil, or
// the read end of a pipe that a goroutine fills from r.
func (t *tree) inFile(r io.Reader) (*os.File, error) {
	if f, ok := r.(*os.File); ok {
		return f, nil
	}
	if r == nil {
		f, err := os.Open(os.DevNull)
		if err == nil {
			t.closeAfter = append(t.closeAfter, f)
		}
		return f, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	t.closeAfter = append(t.closeAfter, pr)
	t.ours = append(t.ours, pw)
	go func() { _, _ = io.Copy(pw, r) }()
	return pr, nil
}

// outFile returns w as a file for the child: itself, or the write end of a
// pipe that a goroutine copies to w.
func (t *tree) outFile(w io.Writer) (*os.File, error) {
	if f, ok := w.(*os.File); ok {
		return f, nil
	}
	if w == nil {
		w = io.Discard
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	t.closeAfter = append(t.closeAfter, pw)
	t.ours = append(t.ours, pr)
	t.copies.Add(1)
	go func() {
		defer t.copies.Done()
		_, _ = io.Copy(w, pr)
	}()
	return pw, nil
}

// closeStdio closes the child's ends of the stdio pipes.
func (t *tree) closeStdio() {
	for _, f := range t.closeAfter {
		f.Close()
	}
	t.closeAfter = nil
}

// signal sends sig to the whole group (under the no-group-signal mutation:
// to the command only, if it has started).
func (t *tree) signal(sig os.Signal) {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return
	}
	if t.group {
		_ = unix.Kill(-t.pgid, s)
		return
	}
	if pid := t.report().pid; pid > 0 {
		_ = unix.Kill(pid, s)
	}
}

// setRemaining tells the keeper the lease's time left: it kills the group
// when that passes without a newer one. It never blocks: a deadline the
// keeper has not read yet is replaced.
func (t *tree) setRemaining(d time.Duration) { t.setDeadline(deadlineIn(d)) }

// setRemainingOf is setRemaining(remaining()), but with the host's clocks
// read before remaining is called: a delay between the two (preemption,
// a stop) makes the deadline earlier, never later than the lease's.
func (t *tree) setRemainingOf(remaining func() time.Duration) {
	now := hostNow()
	d := remaining()
	t.setDeadline(hostTime{boot: now.boot + d, mono: now.mono + d})
}

func (t *tree) setDeadline(dl hostTime) {
	select {
	case <-t.dl:
	default:
	}
	t.dl <- dl
}

func (t *tree) writeDeadlines() {
	defer t.wg.Done()
	for {
		select {
		case d := <-t.dl:
			if _, err := io.WriteString(t.ctl, d.String()); err != nil {
				return
			}
		case <-t.stop:
			return
		}
	}
}

func (t *tree) readReport(r *os.File) {
	defer t.wg.Done()
	defer r.Close()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		word, rest, _ := strings.Cut(sc.Text(), " ")
		t.mu.Lock()
		switch word {
		case "pid":
			t.rep.pid, _ = strconv.Atoi(rest)
		case "exit":
			t.rep.code, _ = strconv.Atoi(rest)
			t.rep.done = true
		case "signal":
			t.rep.signal, _ = strconv.Atoi(rest)
			t.rep.done = true
		case "left":
			t.rep.leftover = rest
		case "deadline":
			t.rep.deadline = true
		case "stopped", "continued":
			sig, _ := strconv.Atoi(rest)
			select { // never blocks: the loop may be gone
			case t.jobs <- treeEvent{stopped: word == "stopped", continued: word == "continued", sig: syscall.Signal(sig)}:
			default:
			}
		case "error":
			c, msg, _ := strings.Cut(rest, " ")
			t.rep.errCode, _ = strconv.Atoi(c)
			t.rep.errMsg = msg
		}
		t.mu.Unlock()
	}
}

func (t *tree) report() treeReport {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.rep
}

// wait sends the keeper's stops and its exit to events. When it has exited,
// the group is sent SIGKILL before the keeper is reaped (while its pid
// still names the group): the keeper stops the group itself before it
// exits normally, so this only matters when it died unexpectedly.
func (t *tree) wait() {
	for {
		exited, err := waitExitOrStop(t.pgid)
		if err != nil {
			t.events <- treeEvent{err: err}
			return
		}
		if exited && t.group {
			_ = unix.Kill(-t.pgid, unix.SIGKILL)
		}
		var ws syscall.WaitStatus
		for {
			_, err = syscall.Wait4(t.pgid, &ws, syscall.WUNTRACED, nil)
			if !errors.Is(err, syscall.EINTR) {
				break
			}
		}
		if err != nil {
			t.events <- treeEvent{err: err}
			return
		}
		if ws.Stopped() {
			t.events <- treeEvent{stopped: true, status: ws}
			continue
		}
		if !exited && t.group {
			_ = unix.Kill(-t.pgid, unix.SIGKILL) // it exited between the two waits
		}
		t.events <- treeEvent{status: ws}
		return
	}
}

// close ends the tree after its keeper has exited: it stops the deadline
// writer, closes the control pipe, waits for the report and for the copies
// of stdout and stderr (at most a second: a process that left the group
// may hold them open), and takes the terminal back.
func (t *tree) close() {
	close(t.stop)
	t.ctl.Close()
	t.wg.Wait()
	done := make(chan struct{})
	go func() {
		t.copies.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Second):
	}
	for _, f := range t.ours {
		f.Close() // ends copies still blocked (by a process that left the group)
	}
	if t.tty != nil {
		t.tty.close(t.pgid)
	}
}
