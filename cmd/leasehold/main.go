// Command leasehold takes leases from the command line: it runs commands
// while holding a lease, lists live leases and demonstrates turn-taking.
// See "leasehold --help".
package main

import (
	"context"
	"os"

	"github.com/leasehold/leasehold/internal/cli"
)

func main() {
	// "run" and "elect" start this binary again as the keeper of the
	// command's process group; it must not parse any arguments.
	if cli.KeeperRequested() {
		os.Exit(cli.RunKeeper())
	}
	os.Exit(cli.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
