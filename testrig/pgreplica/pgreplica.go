//go:build unix

// Package pgreplica runs a private PostgreSQL primary and a streaming
// replica on loopback ports, for the tests of a failover: the replica is
// copied from the primary with `pg_basebackup -R` (so it streams from it),
// promoted with `pg_ctl promote`, and the old primary, once stopped, is
// made the new primary's replica again by a fresh pg_basebackup. Clients
// reach whichever node is the primary through one multi-host URL with
// target_session_attrs=read-write ([Set.URL]), which pgx supports: it
// tries the hosts in order and keeps the first that accepts writes.
//
// The nodes run as the postgres user when this process is root (package
// pgcluster), under the system's temporary directory.
package pgreplica

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/testrig/enginetest"
	"github.com/leasehold/leasehold/testrig/pgcluster"
)

// Node is one PostgreSQL server of a Set.
type Node struct {
	Name string // "a" or "b"
	Port int
	c    *pgcluster.Cluster
	cmd  *exec.Cmd
}

// URL is the node's own URL (user postgres, database postgres).
func (n *Node) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", n.Port)
}

// Running reports whether the node's server was started and not killed.
func (n *Node) Running() bool { return n.cmd != nil }

// Set is a primary and its replica.
type Set struct {
	t       testing.TB
	bin     string
	nodes   [2]*Node
	primary int      // index of the primary in nodes
	args    []string // server settings of both nodes
}

// Option configures Start.
type Option func(*Set)

// WithSetting adds a server setting (name=value, as for `postgres -c`)
// to both nodes.
func WithSetting(kv string) Option { return func(s *Set) { s.args = append(s.args, "-c", kv) } }

// Start initialises node a as the primary, copies it to node b with
// pg_basebackup -R, starts both and waits until b streams from a. Both
// are killed when the test ends. It skips the test (enginetest.Missing)
// without PostgreSQL's server programs.
func Start(t testing.TB, opts ...Option) *Set {
	t.Helper()
	bin, err := pgcluster.BinDir()
	if err != nil {
		enginetest.Missing(t, "PostgreSQL", err.Error())
	}
	s := &Set{t: t, bin: bin, args: []string{
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "full_page_writes=off",
		"-c", "wal_level=replica", "-c", "max_wal_senders=4", "-c", "wal_keep_size=256MB",
		"-c", "hot_standby=on", "-c", "wal_receiver_status_interval=1s",
		"-c", "wal_retrieve_retry_interval=200ms",
	}}
	for _, o := range opts {
		o(s)
	}
	for i, name := range []string{"a", "b"} {
		dir, err := os.MkdirTemp("", "leasehold-pgreplica-"+name+"-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		c, err := pgcluster.Prepare(bin, dir)
		if errors.Is(err, pgcluster.ErrNoOwner) {
			enginetest.Missing(t, "PostgreSQL", err.Error())
		}
		if err != nil {
			t.Fatal(err)
		}
		s.nodes[i] = &Node{Name: name, Port: enginetest.FreePort(t), c: c}
	}
	t.Cleanup(func() {
		for _, n := range s.nodes {
			s.Kill(n)
		}
	})
	a := s.nodes[0]
	if _, err := pgcluster.Init(context.Background(), bin, a.c.Dir); err != nil {
		t.Fatal(err)
	}
	s.start(a)
	s.copyFrom(a, s.nodes[1])
	s.start(s.nodes[1])
	s.WaitStreaming()
	return s
}

// Primary is the node that accepts writes (after a Promote, the promoted
// one).
func (s *Set) Primary() *Node { return s.nodes[s.primary] }

// Replica is the other node.
func (s *Set) Replica() *Node { return s.nodes[1-s.primary] }

// URL is the multi-host URL of both nodes, a first, with
// target_session_attrs=read-write: pgx connects to the first node that
// accepts writes, so clients follow a promotion when their connections
// are made again.
func (s *Set) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write",
		s.nodes[0].Port, s.nodes[1].Port)
}

func (s *Set) start(n *Node) {
	s.t.Helper()
	argv := append([]string{"-D", n.c.Data, "-p", strconv.Itoa(n.Port), "-k", n.c.Dir}, s.args...)
	cmd := n.c.Command("postgres", argv...)
	logf, err := os.OpenFile(filepath.Join(n.c.Dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	err = cmd.Start()
	logf.Close()
	if err != nil {
		s.t.Fatalf("start postgres %s: %v", n.Name, err)
	}
	n.cmd = cmd
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if n.c.Command("pg_isready", "-h", "127.0.0.1", "-p", strconv.Itoa(n.Port), "-U", "postgres").Run() == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("postgres %s not ready in 60s:\n%s", n.Name, s.Log(n))
		}
	}
}

// Log returns the end of a node's server log.
func (s *Set) Log(n *Node) string {
	b, _ := os.ReadFile(filepath.Join(n.c.Dir, "server.log"))
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return string(b)
}

// copyFrom makes dst's data directory a copy of src's, configured to
// stream from src (pg_basebackup -R), replacing what was there.
func (s *Set) copyFrom(src, dst *Node) {
	s.t.Helper()
	if err := os.RemoveAll(dst.c.Data); err != nil {
		s.t.Fatal(err)
	}
	cmd := dst.c.Command("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(src.Port), "-U", "postgres",
		"-D", dst.c.Data, "-R", "-X", "stream", "-c", "fast", "--no-sync")
	if out, err := cmd.CombinedOutput(); err != nil {
		s.t.Fatalf("pg_basebackup of %s into %s: %v\n%s", src.Name, dst.Name, err, out)
	}
}

// Kill sends SIGKILL to a node's postmaster and its backends (which run
// in sessions of their own: found by their working directory, the data
// directory) and waits until none is left.
func (s *Set) Kill(n *Node) {
	if n.cmd == nil {
		return
	}
	_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
	_ = n.cmd.Wait()
	n.cmd = nil
	enginetest.KillProcessesIn(n.c.Data)
}

// Query runs sql on node n (a fresh connection) and scans its one row
// into dest.
func (s *Set) Query(n *Node, sql string, dest ...any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, n.URL())
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if len(dest) == 0 {
		_, err = conn.Exec(ctx, sql)
		return err
	}
	return conn.QueryRow(ctx, sql).Scan(dest...)
}

// must is Query that fails the test on an error.
func (s *Set) must(n *Node, sql string, dest ...any) {
	s.t.Helper()
	if err := s.Query(n, sql, dest...); err != nil {
		s.t.Fatalf("%s on %s: %v", sql, n.Name, err)
	}
}

// WaitStreaming waits until the replica's WAL receiver streams from the
// primary.
func (s *Set) WaitStreaming() {
	s.t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var n int
		if s.Query(s.Replica(), "SELECT count(*)::int FROM pg_stat_wal_receiver WHERE status = 'streaming'", &n) == nil && n == 1 {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("replica %s not streaming in 60s:\n%s", s.Replica().Name, s.Log(s.Replica()))
		}
	}
}

// CatchUp waits until the replica has replayed everything the primary
// had written when it was called.
func (s *Set) CatchUp() {
	s.t.Helper()
	var lsn string
	s.must(s.Primary(), "SELECT pg_current_wal_lsn()::text", &lsn)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var ok bool
		if s.Query(s.Replica(), "SELECT pg_last_wal_replay_lsn() >= '"+lsn+"'::pg_lsn", &ok) == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("replica %s did not replay up to %s in 60s", s.Replica().Name, lsn)
		}
	}
}

// Detach stops the replica's streaming (its primary_conninfo is emptied
// and the configuration reloaded), so that what the primary commits from
// now on never reaches it: an asynchronous replica that fell behind.
func (s *Set) Detach() {
	s.t.Helper()
	r := s.Replica()
	s.must(r, "ALTER SYSTEM SET primary_conninfo = ''")
	s.must(r, "SELECT pg_reload_conf()")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var n int
		if s.Query(r, "SELECT count(*)::int FROM pg_stat_wal_receiver", &n) == nil && n == 0 {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("replica %s still has a WAL receiver 30s after Detach", r.Name)
		}
	}
}

// Promote promotes the replica (pg_ctl promote, waiting until it accepts
// writes); it becomes the primary. Stop the old primary first (Kill), as a
// failover manager fences it: two primaries would both grant.
func (s *Set) Promote() {
	s.t.Helper()
	r := s.Replica()
	if out, err := r.c.Command("pg_ctl", "promote", "-D", r.c.Data, "-w", "-t", "60").CombinedOutput(); err != nil {
		s.t.Fatalf("pg_ctl promote %s: %v\n%s\n%s", r.Name, err, out, s.Log(r))
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var rec bool
		if s.Query(r, "SELECT pg_is_in_recovery()", &rec) == nil && !rec {
			break
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s still in recovery 60s after pg_ctl promote", r.Name)
		}
	}
	s.primary = 1 - s.primary
}

// Rebase makes the replica node (the old primary, which must be stopped)
// a fresh copy of the primary with pg_basebackup -R, starts it and waits
// until it streams.
func (s *Set) Rebase() {
	s.t.Helper()
	r := s.Replica()
	s.Kill(r)
	s.copyFrom(s.Primary(), r)
	s.start(r)
	s.WaitStreaming()
}

// Timeline returns the primary's current timeline id, as the store reads
// it (the first 8 hex digits of the name of the WAL file being written).
func (s *Set) Timeline() int64 {
	s.t.Helper()
	var name string
	s.must(s.Primary(), "SELECT pg_walfile_name(pg_current_wal_lsn())", &name)
	tl, err := strconv.ParseInt(strings.ToLower(name[:8]), 16, 64)
	if err != nil {
		s.t.Fatalf("WAL file name %q: %v", name, err)
	}
	return tl
}
