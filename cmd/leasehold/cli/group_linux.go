package cli

import (
	"bytes"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// othersInGroup reports whether a process other than this one is in the
// process group pgid, from /proc: the keeper can tell when its group is
// empty while it stays in it. ok is false where /proc cannot be read.
func othersInGroup(pgid int) (others, ok bool) {
	ok = groupMembers(pgid, func(int) bool { others = true; return false })
	return others, ok
}

// killOthersInGroup sends SIGKILL to every process of the group pgid but
// this one (the keeper, which stays to report). A process a member forks
// meanwhile is found by the next call.
func killOthersInGroup(pgid int) {
	groupMembers(pgid, func(pid int) bool {
		killMember(pid, pgid)
		return true
	})
}

// killMember sends SIGKILL to pid if it is (still) in the group pgid: a
// pidfd pins the process, and its group is read again through it, so a
// pid reused meanwhile by another process is never signalled. Without
// pidfds (Linux before 5.3) it is a plain kill.
func killMember(pid, pgid int) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if err == unix.ENOSYS {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		return
	}
	defer unix.Close(fd)
	if pg, err := unix.Getpgid(pid); err != nil || pg != pgid {
		return // gone, or another process now has the pid
	}
	_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
}

// groupMembers calls f with each live process of the group pgid but this one,
// until f returns false; false if /proc cannot be read.
func groupMembers(pgid int, f func(pid int) bool) bool {
	d, err := os.Open("/proc")
	if err != nil {
		return false
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return false
	}
	self, want := os.Getpid(), strconv.Itoa(pgid)
	for _, n := range names {
		if n == "" || n[0] < '0' || n[0] > '9' {
			continue
		}
		pid, err := strconv.Atoi(n)
		if err != nil || pid == self {
			continue
		}
		b, err := os.ReadFile("/proc/" + n + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces and ")".
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		fs := bytes.Fields(b[i+1:])
		// A zombie (Z) or dead (X) process does nothing more: not a member.
		if len(fs) >= 3 && string(fs[2]) == want && fs[0][0] != 'Z' && fs[0][0] != 'X' && !f(pid) {
			break
		}
	}
	return true
}
