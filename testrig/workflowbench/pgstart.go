package workflowbench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/testrig/pgcluster"
)

// privatePostgres is a throwaway PostgreSQL server with fsync on (the
// default), for the experiment: the test engines run with fsync off.
type privatePostgres struct {
	URL  string
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// startPostgres initialises a cluster in a new directory under parentDir
// (empty: the system's temporary directory) and starts it on a free
// loopback port with fsync and full_page_writes on. As root it runs
// PostgreSQL as the postgres user (package pgcluster), which must be able
// to enter parentDir.
func startPostgres(ctx context.Context, parentDir string) (*privatePostgres, error) {
	bin, err := pgcluster.BinDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(parentDir, "leasehold-wfbench-pg-")
	if err != nil {
		return nil, err
	}
	p := &privatePostgres{dir: dir, done: make(chan struct{})}
	c, err := pgcluster.Init(ctx, bin, dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	data := c.Data
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p.cmd = c.Command("postgres", "-D", data, "-p", strconv.Itoa(port), "-k", dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=on", "-c", "full_page_writes=on",
		"-c", "synchronous_commit=on", "-c", "max_connections=300")
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	go func() { p.cmd.Wait(); logf.Close(); close(p.done) }()
	p.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	deadline := time.Now().Add(60 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		c, err := pgx.Connect(cctx, p.URL)
		cancel()
		if err == nil {
			c.Close(ctx)
			return p, nil
		}
		select {
		case <-p.done:
			log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			os.RemoveAll(dir)
			return nil, fmt.Errorf("postgres exited: %s", log)
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			p.Stop()
			return nil, fmt.Errorf("postgres did not accept connections: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop shuts the server down (fast shutdown, then kill) and removes its
// files.
func (p *privatePostgres) Stop() {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	os.RemoveAll(p.dir)
}
