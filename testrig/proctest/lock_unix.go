//go:build unix

package proctest

import (
	"os"
	"syscall"
)

// lockNB takes an exclusive flock on f without waiting.
func lockNB(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}
