//go:build unix

package cli

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// forwardedSignals are caught by "run" and forwarded to the command.
var forwardedSignals = []os.Signal{
	syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP,
	syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2,
}

// signalExitCode is the shell's exit status for death by sig: 128+N.
func signalExitCode(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 128 + int(syscall.SIGINT)
}

// exitCode returns the command's exit status, or 128+N if signal N killed
// it.
func exitCode(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	if c := ps.ExitCode(); c >= 0 {
		return c
	}
	return ExitInternal
}

// deliveredByTerminal reports whether sig is a SIGINT or SIGQUIT that the
// terminal most likely sent to our whole foreground process group, which
// includes the command: our process group is the foreground group of our
// controlling terminal. Such a signal is not forwarded, so that one Ctrl-C
// reaches the command once. A kill(1) of leasehold alone in that situation
// is not forwarded either; SIGTERM, SIGHUP and the others always are.
func deliveredByTerminal(sig os.Signal) bool {
	if sig != syscall.SIGINT && sig != syscall.SIGQUIT {
		return false
	}
	return inForeground()
}

// inForeground reports whether our process group is the foreground process
// group of our controlling terminal.
func inForeground() bool {
	tty, err := os.Open("/dev/tty")
	if err != nil {
		return false // no controlling terminal
	}
	defer tty.Close()
	pgrp, err := unix.IoctlGetInt(int(tty.Fd()), unix.TIOCGPGRP)
	return err == nil && pgrp == unix.Getpgrp()
}
