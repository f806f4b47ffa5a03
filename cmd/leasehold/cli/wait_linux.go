package cli

import (
	"errors"

	"golang.org/x/sys/unix"
)

// si_code values of SIGCHLD (linux/include/uapi/asm-generic/siginfo.h).
const (
	cldExited = 1
	cldKilled = 2
	cldDumped = 3
)

// waitExitOrStop blocks until the child pid has exited or stopped, without
// reaping it, and reports whether it exited: until it is reaped its pid
// keeps naming its process group.
func waitExitOrStop(pid int) (exited bool, err error) {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WSTOPPED|unix.WNOWAIT, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return false, err
		}
		switch info.Code {
		case cldExited, cldKilled, cldDumped:
			return true, nil
		}
		return false, nil
	}
}

// becomeSubreaper makes this process (the keeper) the parent of every
// orphaned process below it, so that it reaps them and no zombie lingers
// in the command's group (where a container's init may never reap it).
func becomeSubreaper() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) }
