//go:build unix && !linux

package cli

// waitExitOrStop cannot wait without reaping here: it returns at once, and
// the caller's wait4 reaps the child. The group is then signalled just
// after the keeper is reaped; its id could only name another group if every
// process of it had exited and the id were reused in that instant.
func waitExitOrStop(pid int) (exited bool, err error) { return false, nil }

// becomeSubreaper does nothing here: orphans are reaped by init.
func becomeSubreaper() {}
