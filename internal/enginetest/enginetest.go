// Package enginetest finds the engines that scripts/engines.sh started for
// the tests, and starts private instances that a test may kill and restart.
// Tests call it and skip, with a message saying how to start the engines,
// when an engine is not configured.
package enginetest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

const howTo = "start the engines with: eval \"$(scripts/engines.sh start)\" (or run scripts/test.sh)"

// PostgresURL returns the shared test PostgreSQL URL, or skips the test.
func PostgresURL(t testing.TB) string {
	return envOrSkip(t, "LEASEHOLD_TEST_POSTGRES", "PostgreSQL")
}

// RedisURL returns the shared test Redis URL, or skips the test.
func RedisURL(t testing.TB) string {
	return envOrSkip(t, "LEASEHOLD_TEST_REDIS", "Redis")
}

func envOrSkip(t testing.TB, key, what string) string {
	t.Helper()
	v := os.Getenv(key)
	if v == "" {
		t.Skipf("%s not configured ($%s is empty): %s", what, key, howTo)
	}
	return v
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Server is a private engine process that a test may kill and restart. It
// keeps its port and data directory across restarts.
type Server struct {
	t    testing.TB
	Port int
	Dir  string
	argv []string
	uid  *syscall.Credential
	cmd  *exec.Cmd
	wait func() bool // readiness probe
	// procDir, when set, is the working directory of every process of the
	// server (PostgreSQL: its data directory). Its backends run in process
	// groups of their own, so Kill finds them by it.
	procDir string
}

// Start starts the process and waits until it answers.
func (s *Server) Start() {
	s.t.Helper()
	cmd := exec.Command(s.argv[0], s.argv[1:]...)
	cmd.Dir = s.Dir
	logf, err := os.OpenFile(filepath.Join(s.Dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: s.uid}
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start %s: %v", s.argv[0], err)
	}
	logf.Close()
	s.cmd = cmd
	deadline := time.Now().Add(60 * time.Second)
	for !s.wait() {
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(s.Dir, "server.log"))
			s.t.Fatalf("%s did not become ready in 60s:\n%s", s.argv[0], b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// launch starts the server and kills it when the test ends.
func (s *Server) launch() *Server {
	s.Start()
	s.t.Cleanup(s.Kill)
	return s
}

// binary returns the program named by the environment variable env, else
// name found in PATH; it skips the test when neither is there.
func binary(t testing.TB, env, name string) string {
	t.Helper()
	if bin := os.Getenv(env); bin != "" {
		return bin
	}
	bin, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not found ($%s empty, not in PATH): %s", name, env, howTo)
	}
	return bin
}

// Kill sends SIGKILL to the server's processes and waits for them to exit.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	_ = s.cmd.Wait()
	s.cmd = nil
	if s.procDir == "" {
		return
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		pids := processesIn(s.procDir)
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// processesIn lists the processes whose working directory is dir.
func processesIn(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd")); err == nil && cwd == dir {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Signal sends sig to every process of the server (its process group, and
// for PostgreSQL the backends found by their working directory): SIGSTOP
// and SIGCONT pause and resume it.
func (s *Server) Signal(sig syscall.Signal) {
	if s.cmd == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, sig)
	if s.procDir != "" {
		for _, pid := range processesIn(s.procDir) {
			_ = syscall.Kill(pid, sig)
		}
	}
}

// Running reports whether the server was started and not killed.
func (s *Server) Running() bool { return s.cmd != nil }

// Restart kills the process and starts it again on the same port and data.
func (s *Server) Restart() {
	s.Kill()
	s.Start()
}

func (s *Server) portOpen() bool {
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(s.Port), 200*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// StartRedis starts a private redis-server without persistence (so a
// restart loses its data, as a cache-configured Redis would). extra args are
// appended to its command line. Skips when Redis is not installed.
func StartRedis(t testing.TB, extra ...string) *Server {
	t.Helper()
	bin := binary(t, "LEASEHOLD_TEST_REDIS_SERVER", "redis-server")
	s := &Server{t: t, Port: FreePort(t), Dir: t.TempDir()}
	s.argv = append([]string{bin, "--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.Dir}, extra...)
	s.wait = s.portOpen
	return s.launch()
}

// RedisURL returns the URL of a private Redis server.
func (s *Server) RedisURL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", s.Port) }

// StartPostgres initialises and starts a private PostgreSQL cluster (as the
// postgres user when running as root). Skips when the binaries are missing.
func StartPostgres(t testing.TB) *Server {
	t.Helper()
	bin := os.Getenv("LEASEHOLD_TEST_PG_BIN")
	if bin == "" {
		matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
		if len(matches) == 0 {
			t.Skipf("PostgreSQL binaries not found: %s", howTo)
		}
		bin = matches[len(matches)-1]
	}
	dir, err := os.MkdirTemp("", "leasehold-pgtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &Server{t: t, Port: FreePort(t), Dir: dir}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Skipf("running as root and there is no postgres user to run PostgreSQL as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.uid = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", filepath.Join(dir, "data"), "-U", "postgres", "--auth=trust", "-E", "UTF8")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: s.uid}
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	s.argv = []string{filepath.Join(bin, "postgres"), "-D", filepath.Join(dir, "data"), "-p", strconv.Itoa(s.Port),
		"-k", dir, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "full_page_writes=off"}
	s.wait = func() bool { return s.portOpen() && s.pgReady(bin) }
	s.procDir = filepath.Join(dir, "data")
	return s.launch()
}

func (s *Server) pgReady(bin string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "pg_isready"), "-h", "127.0.0.1", "-p", strconv.Itoa(s.Port), "-U", "postgres")
	return cmd.Run() == nil
}

// PostgresURL returns the URL of a private PostgreSQL server.
func (s *Server) PostgresURL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.Port)
}

// DynamoDBURL returns the shared test DynamoDB (dynalite) store URL, or
// skips the test.
func DynamoDBURL(t testing.TB) string {
	return envOrSkip(t, "LEASEHOLD_TEST_DYNAMODB", "DynamoDB (dynalite)")
}

// EtcdURL returns the shared test etcd store URL, or skips the test.
func EtcdURL(t testing.TB) string {
	return envOrSkip(t, "LEASEHOLD_TEST_ETCD", "etcd")
}

// StartDynalite starts a private dynalite (in memory, so a restart loses
// its data, unless extra has "--path", DIR for LevelDB on disk). Skips when
// dynalite or node is not installed.
func StartDynalite(t testing.TB, extra ...string) *Server {
	t.Helper()
	cli := os.Getenv("LEASEHOLD_TEST_DYNALITE")
	node, err := exec.LookPath("node")
	if cli == "" || err != nil {
		t.Skipf("dynalite not found ($LEASEHOLD_TEST_DYNALITE empty or no node): %s", howTo)
	}
	s := &Server{t: t, Port: FreePort(t), Dir: t.TempDir()}
	s.argv = append([]string{node, cli, "--port", strconv.Itoa(s.Port), "--host", "127.0.0.1"}, extra...)
	s.wait = s.portOpen
	return s.launch()
}

// DynamoDBEndpoint returns the HTTP endpoint of a private dynalite.
func (s *Server) DynamoDBEndpoint() string { return fmt.Sprintf("http://127.0.0.1:%d", s.Port) }

// StartEtcd starts a private single-member etcd with its data in a
// directory that survives Restart. Skips when etcd is not installed.
func StartEtcd(t testing.TB) *Server {
	t.Helper()
	bin := binary(t, "LEASEHOLD_TEST_ETCD_BIN", "etcd")
	s := &Server{t: t, Port: FreePort(t), Dir: t.TempDir()}
	peer := FreePort(t)
	client, peerURL := fmt.Sprintf("http://127.0.0.1:%d", s.Port), fmt.Sprintf("http://127.0.0.1:%d", peer)
	s.argv = []string{bin, "--name", "t", "--data-dir", filepath.Join(s.Dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "t=" + peerURL}
	s.wait = s.portOpen
	return s.launch()
}

// EtcdURL returns the store URL of a private etcd.
func (s *Server) EtcdURL() string { return fmt.Sprintf("etcd://127.0.0.1:%d", s.Port) }
