//go:build !linux

package wal

import "os"

// fdatasync flushes f to stable storage.
func fdatasync(f *os.File) error { return f.Sync() }

// lockDir does nothing outside Linux: the caller must not open one log
// from two processes.
func lockDir(name string) (unlock func() error, err error) {
	return func() error { return nil }, nil
}
