//go:build !linux

package serverbench

import "os"

func datasync(f *os.File) error { return f.Sync() }
