package cli

import (
	"os"
	"strings"
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
	os.Exit(m.Run())
}
