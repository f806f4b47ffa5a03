//go:build !unix

package pgcluster

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
)

type owner struct{}

// Init is not supported on this system: the private clusters are started
// the Unix way (process groups, a postgres user when root).
func Init(ctx context.Context, bin, dir string) (*Cluster, error) {
	return nil, errors.New("private PostgreSQL clusters need a Unix system")
}

// Prepare is not supported on this system (see Init).
func Prepare(bin, dir string) (*Cluster, error) {
	return nil, errors.New("private PostgreSQL clusters need a Unix system")
}

// Command returns a command that runs one of the server programs.
func (c *Cluster) Command(program string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(c.Bin, program), args...)
	cmd.Dir = c.Dir
	return cmd
}
