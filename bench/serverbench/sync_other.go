//go:build !linux

package serverbench

import (
	"os"
	"time"
)

func datasync(f *os.File) error { return f.Sync() }

// cpuTime is the CPU time this process has used (0: not measured here).
func cpuTime() time.Duration { return 0 }
