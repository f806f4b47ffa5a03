package cli

import (
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
)

// TestMain lets this test binary be the keeper of the commands that the
// tests run in-process ("run" and "elect" start their own binary as the
// keeper).
func TestMain(m *testing.M) {
	if KeeperRequested() {
		os.Exit(RunKeeper())
	}
	// Keepers are this binary: built with -race, each would sleep a second
	// before it exits (the race detector's default), and commands that
	// exit on SIGTERM would meet their SIGKILL first.
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	// The serve tests stop their serves with a SIGTERM to this process
	// (serve_test.go) and catch it while they run. Caught for the whole
	// run as well: a SIGTERM delivered a moment after its test ended (and
	// stopped catching it) otherwise ended the test binary (CI, loaded:
	// "signal: terminated" for this package). The channel is never read:
	// a full channel drops the signal.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGTERM)
	os.Exit(m.Run())
}
