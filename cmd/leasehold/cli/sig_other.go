//go:build !unix

package cli

import "os"

// forwardedSignals are caught by "run" and forwarded to the command.
var forwardedSignals = []os.Signal{os.Interrupt}

// catchSignals returns the signals "run" catches.
func catchSignals() []os.Signal { return forwardedSignals }

// signalExitCode is the exit status for an interruption by sig.
func signalExitCode(os.Signal) int { return 130 }
