package wal

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// fdatasync flushes f's data, and only the metadata needed to read it back,
// to stable storage.
func fdatasync(f *os.File) error {
	return onFd(f, func(fd int) error { return unix.Fdatasync(fd) })
}

// writeBack starts writing f's dirty pages in [off, off+n) to the disk and
// waits for them (sync_file_range): a pace for writing a large file, not
// durability (it flushes neither metadata nor the disk's cache).
func writeBack(f *os.File, off, n int64) error {
	return onFd(f, func(fd int) error {
		return unix.SyncFileRange(fd, off, n, unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER)
	})
}

// onFd runs call on f's descriptor, again while it is interrupted (EINTR).
func onFd(f *os.File, call func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			if serr = call(int(fd)); serr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	return serr
}

// lockDir takes an exclusive lock on the file name, creating it, so that
// two processes cannot open one log. The lock ends when the returned
// function is called or the process exits.
func lockDir(name string) (unlock func() error, err error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if err == unix.EWOULDBLOCK {
			return nil, fmt.Errorf("wal: %s is in use by another Log", name)
		}
		return nil, fmt.Errorf("wal: locking %s: %w", name, err)
	}
	return f.Close, nil
}
