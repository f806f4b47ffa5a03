//go:build unix

package cli

import "syscall"

// fileLimit is the process's limit on open files (its soft RLIMIT_NOFILE,
// which Go raises to the hard one at start), or 0 if it cannot be read or
// there is none.
func fileLimit() uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0
	}
	if cur := uint64(r.Cur); cur != ^uint64(0) {
		return cur
	}
	return 0
}
