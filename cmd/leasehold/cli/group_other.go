//go:build unix && !linux

package cli

// othersInGroup is unknown without /proc: the keeper leaves its group to
// tell when it is empty (see stopLeftovers).
func othersInGroup(pgid int) (others, ok bool) { return false, false }

func killOthersInGroup(pgid int) {}
