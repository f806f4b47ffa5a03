//go:build unix

package cli

import (
	"os"
	"os/signal"
	"syscall"
)

// forwardedSignals are caught by "run" and forwarded to the command's
// process group.
var forwardedSignals = []os.Signal{
	syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP,
	syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2,
}

// catchSignals returns the forwarded signals that are not ignored: a
// signal ignored when leasehold started (SIGHUP under nohup, SIGINT and
// SIGQUIT for a background job of a shell without job control) is left
// ignored, and the command inherits that.
func catchSignals() []os.Signal {
	var out []os.Signal
	for _, s := range forwardedSignals {
		if !signal.Ignored(s) {
			out = append(out, s)
		}
	}
	return out
}

// signalExitCode is the shell's exit status for death by sig: 128+N.
func signalExitCode(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 128 + int(syscall.SIGINT)
}
