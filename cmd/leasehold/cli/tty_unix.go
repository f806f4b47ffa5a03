//go:build unix

package cli

import (
	"os"
	"os/signal"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// terminal is leasehold's controlling terminal while it supervises a
// command. When leasehold's process group is the terminal's foreground
// group, the command's group is given the foreground instead (so that
// Ctrl-C, Ctrl-Z and reads of the terminal reach the command, as they would
// without leasehold) and leasehold takes it back when the command stops or
// exits. While it supervises, leasehold ignores SIGTTOU: it changes the
// foreground from the background, and its own messages must not stop it
// when the terminal has "stty tostop" set.
type terminal struct {
	f       *os.File // /dev/tty
	restore func()   // undoes the SIGTTOU ignore
}

// ttouIgnored is whether SIGTTOU was ignored when the process started (read
// once: os/signal cannot tell after Ignore and Reset).
var ttouIgnored = sync.OnceValue(func() bool { return signal.Ignored(syscall.SIGTTOU) })

// openTerminal returns the controlling terminal, or nil if there is none.
func openTerminal() *terminal {
	f, err := os.Open("/dev/tty")
	if err != nil {
		return nil
	}
	return &terminal{f: f}
}

// ignoreTTOU starts ignoring SIGTTOU. It must be called after the keeper
// was started (an ignored signal stays ignored across exec).
func (t *terminal) ignoreTTOU() {
	if ttouIgnored() || t.restore != nil {
		return
	}
	signal.Ignore(syscall.SIGTTOU)
	t.restore = func() { signal.Reset(syscall.SIGTTOU) }
}

// foreground returns the terminal's foreground process group.
func (t *terminal) foreground() (int, error) {
	return unix.IoctlGetInt(int(t.f.Fd()), unix.TIOCGPGRP)
}

// ours reports whether our process group is the foreground group.
func (t *terminal) ours() bool {
	pg, err := t.foreground()
	return err == nil && pg == unix.Getpgrp()
}

// give makes pgid the foreground group if ours is.
func (t *terminal) give(pgid int) {
	if t.ours() {
		_ = unix.IoctlSetPointerInt(int(t.f.Fd()), unix.TIOCSPGRP, pgid)
	}
}

// takeBack makes our group the foreground again if pgid has it.
func (t *terminal) takeBack(pgid int) {
	if pg, err := t.foreground(); err == nil && pg == pgid {
		_ = unix.IoctlSetPointerInt(int(t.f.Fd()), unix.TIOCSPGRP, unix.Getpgrp())
	}
}

// close takes the terminal back from pgid if it still has it, stops
// ignoring SIGTTOU and closes the terminal.
func (t *terminal) close(pgid int) {
	t.takeBack(pgid)
	if t.restore != nil {
		t.restore()
		t.restore = nil
	}
	_ = t.f.Close()
}
