// Package pgcluster initialises throwaway PostgreSQL clusters with the
// server programs installed on this machine: the private servers of the
// tests (testrig/enginetest) and of the benchmarks (the bench module).
//
// PostgreSQL refuses to run as root, so when this process is root the
// cluster's directory is given to the postgres user and initdb (and every
// program started with [Cluster.Command]) runs as that user. That user must
// be able to enter every directory above the cluster's: initialise clusters
// under the system's temporary directory, not under a directory private to
// root (such as one made by os.MkdirTemp, mode 0700).
package pgcluster

import (
	"errors"
	"os"
	"path/filepath"
)

// ErrNoOwner is returned by [Init] when this process is root and there is
// no postgres user to run PostgreSQL as.
var ErrNoOwner = errors.New("running as root and there is no postgres user to run PostgreSQL as")

// BinDir finds PostgreSQL's server programs: $LEASEHOLD_TEST_PG_BIN, else
// the newest /usr/lib/postgresql/*/bin that holds initdb.
func BinDir() (string, error) {
	if d := os.Getenv("LEASEHOLD_TEST_PG_BIN"); d != "" {
		return d, nil
	}
	m, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for i := len(m) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(m[i], "initdb")); err == nil {
			return m[i], nil
		}
	}
	return "", errors.New("$LEASEHOLD_TEST_PG_BIN is empty and there is no /usr/lib/postgresql/*/bin with initdb")
}

// Cluster is a data directory made by [Init].
type Cluster struct {
	Bin  string // the server programs (initdb, postgres, pg_ctl, pg_isready)
	Dir  string // the directory given to Init; it also takes the socket and logs
	Data string // Dir/data, the cluster's data directory
	owner
}
