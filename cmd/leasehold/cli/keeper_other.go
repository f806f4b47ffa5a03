//go:build !unix

package cli

// KeeperRequested reports false: this platform runs commands without a
// keeper.
func KeeperRequested() bool { return false }

// RunKeeper is never called on this platform.
func RunKeeper() int { return ExitInternal }
