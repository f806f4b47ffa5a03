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
