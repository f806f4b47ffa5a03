// Command genman writes the leasehold command's manual pages (one per
// command, from their help texts) into the directory it is given:
//
//	go generate ./cmd/leasehold/cli    (writes docs/man)
//
// It clears HOME and XDG_DATA_HOME first, so that the help texts that name
// the default store and data directory say "~/.local/share/leasehold/..."
// whoever runs it.
package main

import (
	"fmt"
	"os"

	"github.com/leasehold/leasehold/cmd/leasehold/cli"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: genman DIR")
		os.Exit(64)
	}
	os.Unsetenv("HOME")
	os.Unsetenv("XDG_DATA_HOME")
	if err := cli.WriteManPages(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "genman:", err)
		os.Exit(1)
	}
}
