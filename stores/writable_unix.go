//go:build unix

package stores

import (
	"path/filepath"

	"golang.org/x/sys/unix"
)

// writable reports whether this process may open the SQLite file at path
// for writing: write the file, and create the -wal and -shm files beside
// it (write the directory, or they exist and it may write them).
func writable(path string) bool {
	w := func(p string) bool { return unix.Access(p, unix.W_OK) == nil }
	if !w(path) {
		return false
	}
	return w(filepath.Dir(path)) || w(path+"-wal") && w(path+"-shm")
}
