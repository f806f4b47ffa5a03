package workflowbench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// privatePostgres is a throwaway PostgreSQL server with fsync on (the
// default), for the experiment: the test engines run with fsync off.
type privatePostgres struct {
	URL  string
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// pgBinDir finds PostgreSQL's server programs: $LEASEHOLD_TEST_PG_BIN or
// the newest /usr/lib/postgresql/*/bin.
func pgBinDir() (string, error) {
	if d := os.Getenv("LEASEHOLD_TEST_PG_BIN"); d != "" {
		return d, nil
	}
	m, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for i := len(m) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(m[i], "initdb")); err == nil {
			return m[i], nil
		}
	}
	return "", errors.New("PostgreSQL's server programs were not found (set $LEASEHOLD_TEST_PG_BIN or install postgresql)")
}

// startPostgres initialises a cluster in a temporary directory and starts
// it on a free loopback port with fsync and full_page_writes on. As root it
// runs PostgreSQL as the postgres user.
func startPostgres(ctx context.Context, parentDir string) (*privatePostgres, error) {
	bin, err := pgBinDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(parentDir, "leasehold-wfbench-pg-")
	if err != nil {
		return nil, err
	}
	p := &privatePostgres{dir: dir, done: make(chan struct{})}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("running as root and there is no postgres user to run PostgreSQL as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
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
	p.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port), "-k", dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=on", "-c", "full_page_writes=on",
		"-c", "synchronous_commit=on", "-c", "max_connections=300")
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
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
		_ = p.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	os.RemoveAll(p.dir)
}
