//go:build unix

package pgcluster_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/testrig/enginetest"
	"github.com/leasehold/leasehold/testrig/pgcluster"
)

func binDir(t *testing.T) string {
	bin, err := pgcluster.BinDir()
	if err != nil {
		enginetest.Missing(t, "PostgreSQL", err.Error())
	}
	return bin
}

// TestInitAndStart initialises a cluster under the system's temporary
// directory and starts postgres with Command: as root that works only if
// both run as the postgres user (postgres refuses root).
func TestInitAndStart(t *testing.T) {
	bin := binDir(t)
	dir, err := os.MkdirTemp("", "leasehold-pgcluster-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	c, err := pgcluster.Init(context.Background(), bin, dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(c.Data, "PG_VERSION")); err != nil {
		t.Fatalf("no cluster in %s: %v", c.Data, err)
	}
	if (os.Geteuid() == 0) != (c.Credential() != nil) {
		t.Fatalf("euid %d, credential %+v", os.Geteuid(), c.Credential())
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	pg := c.Command("postgres", "-D", c.Data, "-p", port, "-k", c.Dir, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off")
	var log strings.Builder
	pg.Stdout, pg.Stderr = &log, &log
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { pg.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-pg.Process.Pid, syscall.SIGKILL)
		<-exited
	})
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		ready := c.Command("pg_isready", "-h", "127.0.0.1", "-p", port, "-U", "postgres")
		if ready.Run() == nil {
			return
		}
		select {
		case <-exited:
			t.Fatalf("postgres exited:\n%s", log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("postgres not ready in 60s:\n%s", log.String())
		}
	}
}

// TestInitNamesBlockedDirectory: as root, a cluster under a directory the
// postgres user cannot enter (t.TempDir is 0700) fails, and the error says
// which directory.
func TestInitNamesBlockedDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root gives the cluster to another user")
	}
	bin := binDir(t)
	parent := t.TempDir()
	if err := os.Chmod(parent, 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := pgcluster.Init(context.Background(), bin, filepath.Join(parent, "pg"))
	if err == nil || !strings.Contains(err.Error(), "cannot enter "+parent) {
		t.Fatalf("got %v, want an error naming %s", err, parent)
	}
}
