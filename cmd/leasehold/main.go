// Command leasehold takes leases from the command line and serves them: it
// runs commands while holding a lease (run) or while elected leader (elect),
// holds, releases and force-releases leases, lists live leases (status),
// prepares a store (store init), runs the lease server (serve), writes Step
// Functions state machines (sfn) and shows workers taking turns (demo).
// The commands live in package cmd/leasehold/cli; see "leasehold --help".
package main

import (
	"context"
	"os"

	"github.com/leasehold/leasehold/cmd/leasehold/cli"
)

func main() {
	// "run" and "elect" start this binary again as the keeper of the
	// command's process group; it must not parse any arguments.
	if cli.KeeperRequested() {
		os.Exit(cli.RunKeeper())
	}
	os.Exit(cli.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
