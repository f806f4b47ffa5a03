//go:build !unix

package cli

import "os"

// forwardedSignals are caught by "run" and forwarded to the command.
var forwardedSignals = []os.Signal{os.Interrupt}

// signalExitCode is the exit status for an interruption by sig.
func signalExitCode(os.Signal) int { return 130 }

// exitCode returns the command's exit status.
func exitCode(ps *os.ProcessState) int {
	if c := ps.ExitCode(); c >= 0 {
		return c
	}
	return ExitInternal
}

// deliveredByTerminal reports whether sig reached the command already; it
// cannot tell here, so it always forwards.
func deliveredByTerminal(os.Signal) bool { return false }
