// Package enginetest finds the engines that scripts/engines.sh started for
// the tests, and starts private instances that a test may kill and restart.
// The stores the tests know are one table, [Engines].
//
// A test whose engine is not configured skips, with a message saying how to
// start the engines, so that a bare "go test ./..." passes anywhere. Where
// engines are required (see [Required]: CI=true, or
// LEASEHOLD_REQUIRE_ENGINES=1, which scripts/test.sh sets) it fails instead,
// naming the engine, so that a run whose engine did not start cannot pass.
// Every test that needs an engine says so through [Missing] or [Partial].
package enginetest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/testrig/pgcluster"
	"github.com/leasehold/leasehold/testrig/proctest"
)

const howTo = "start the engines with: eval \"$(scripts/engines.sh start)\" (or run scripts/test.sh)"

// RequireVar is the environment variable that decides whether a test
// fails, rather than skips, when its engine is missing: 1 (or true) fails,
// 0 (or false) skips. When it is not set, CI decides (most CI systems set
// CI=true). scripts/test.sh sets it to 1.
const RequireVar = "LEASEHOLD_REQUIRE_ENGINES"

// Required reports whether a test whose engine is missing must fail
// rather than skip, and why (the setting that says so). It returns an
// error when RequireVar is set to something other than a boolean.
func Required() (bool, string, error) {
	if v, ok := os.LookupEnv(RequireVar); ok && v != "" {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return true, "", fmt.Errorf("%s=%q is not a boolean (want 1 to require the engines, 0 to let their tests skip)", RequireVar, v)
		}
		return on, RequireVar + "=" + v, nil
	}
	if v := os.Getenv("CI"); v != "" {
		if on, err := strconv.ParseBool(v); err == nil && on {
			return true, "CI=" + v, nil
		}
	}
	return false, "", nil
}

// Missing ends a test that cannot run because engine (a name such as
// "PostgreSQL" or "node and the npm packages") is missing; why says how
// that was seen ("$LEASEHOLD_TEST_POSTGRES is empty"). The test skips,
// saying how to start the engines, unless engines are [Required], where it
// fails. Either way it stops the test (it calls t.SkipNow or t.FailNow).
//
// Use it only for an engine the project's scripts provide: not for a
// capability that is optional (an endpoint with DynamoDB transactions), a
// tier (long runs) or a platform (Linux only, root only).
func Missing(t testing.TB, engine, why string) {
	t.Helper()
	without(t, engine, why, "fails rather than skips", "lets it skip", t.Skip)
}

// Partial reports that a test goes on without engine, doing less (it
// leaves out the part that needs it; why says which part): the test logs
// that and how to start the engines, unless engines are [Required], where
// it fails at once.
func Partial(t testing.TB, engine, why string) {
	t.Helper()
	without(t, engine, why, "fails", "lets it go on without them", t.Log)
}

// Unavailable ends a test that cannot run because the machine lacks a
// capability that CI provides and a developer's machine may not: root,
// network namespaces, nftables (why says how that was seen). Like
// [Missing], the test skips with a message unless engines are [Required]
// (CI=true, LEASEHOLD_REQUIRE_ENGINES=1), where it fails: a suite that CI
// must run never passes there by skipping.
func Unavailable(t testing.TB, capability, why string) {
	t.Helper()
	msg := fmt.Sprintf("no %s (%s)", capability, why)
	req, because, err := Required()
	switch {
	case err != nil:
		t.Fatalf("%s; and %v", msg, err)
	case req:
		t.Fatalf("%s; engines are required here (%s), so this fails rather than skips (%s=0 lets it skip)", msg, because, RequireVar)
	default:
		t.Skip(msg)
	}
}

// without fails the test where engines are required (saying it fails, and
// what RequireVar=0 lets it do), else says so through otherwise.
func without(t testing.TB, engine, why, fails, lets string, otherwise func(args ...any)) {
	t.Helper()
	msg := fmt.Sprintf("no %s (%s): %s", engine, why, howTo)
	req, because, err := Required()
	switch {
	case err != nil:
		t.Fatalf("%s; and %v", msg, err)
	case req:
		t.Fatalf("%s; engines are required here (%s), so this %s (%s=0 %s)", msg, because, fails, RequireVar, lets)
	default:
		otherwise(msg)
	}
}

// PostgresURL returns the shared test PostgreSQL URL; without one, see
// [Missing].
func PostgresURL(t testing.TB) string {
	t.Helper()
	return SharedURL(t, "postgres")
}

// RedisURL returns the shared test Redis URL; without one, see [Missing].
func RedisURL(t testing.TB) string {
	t.Helper()
	return SharedURL(t, "redis")
}

func envOrMissing(t testing.TB, key, what string) string {
	t.Helper()
	v := os.Getenv(key)
	if v == "" {
		Missing(t, what, "$"+key+" is empty")
	}
	return v
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	_, port, _ := net.SplitHostPort(proctest.FreeAddr(t))
	p, _ := strconv.Atoi(port)
	return p
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

// newServer returns a server on a free port, with a fresh directory,
// ready when its port is open (unless its wait is set otherwise).
func newServer(t testing.TB) *Server {
	s := &Server{t: t, Port: FreePort(t), Dir: t.TempDir()}
	s.wait = s.portOpen
	return s
}

// launch starts the server with argv and kills it when the test ends.
func (s *Server) launch(argv ...string) *Server {
	s.argv = argv
	s.Start()
	s.t.Cleanup(s.Kill)
	return s
}

// binary returns the program named by the environment variable env, else
// name found in PATH; when neither is there, see [Missing].
func binary(t testing.TB, env, name string) string {
	t.Helper()
	if bin := os.Getenv(env); bin != "" {
		return bin
	}
	bin, err := exec.LookPath(name)
	if err != nil {
		Missing(t, name, "$"+env+" is empty and "+name+" is not in PATH")
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
	KillProcessesIn(s.procDir)
}

// KillProcessesIn SIGKILLs every process whose working directory is dir
// (a server's children that left its process group) until none is left,
// for at most 30 s.
func KillProcessesIn(dir string) {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		pids := processesIn(dir)
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
// appended to its command line. Without redis-server, see [Missing].
func StartRedis(t testing.TB, extra ...string) *Server { return mustLookup("redis").Start(t, extra...) }

func startRedis(t testing.TB, e Engine, extra ...string) *Server {
	t.Helper()
	bin := binary(t, e.BinVar, "redis-server")
	s := newServer(t)
	return s.launch(append([]string{bin, "--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.Dir}, extra...)...)
}

// RedisURL returns the URL of a private Redis server.
func (s *Server) RedisURL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", s.Port) }

// StartPostgres initialises and starts a private PostgreSQL cluster (as the
// postgres user when running as root). Without the binaries, see [Missing].
func StartPostgres(t testing.TB) *Server { return mustLookup("postgres").Start(t) }

func startPostgres(t testing.TB, e Engine, _ ...string) *Server {
	t.Helper()
	bin, err := pgcluster.BinDir()
	if err != nil {
		Missing(t, e.Title, err.Error())
	}
	dir, err := os.MkdirTemp("", "leasehold-pgtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &Server{t: t, Port: FreePort(t), Dir: dir}
	c, err := pgcluster.Init(context.Background(), bin, dir)
	if errors.Is(err, pgcluster.ErrNoOwner) {
		Missing(t, e.Title, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	s.uid = c.Credential()
	argv := []string{filepath.Join(bin, "postgres"), "-D", filepath.Join(dir, "data"), "-p", strconv.Itoa(s.Port),
		"-k", dir, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "full_page_writes=off"}
	s.wait = func() bool { return s.portOpen() && s.pgReady(bin) }
	s.procDir = filepath.Join(dir, "data")
	return s.launch(argv...)
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

// DynamoDBURL returns the shared test DynamoDB (dynalite) store URL;
// without one, see [Missing].
func DynamoDBURL(t testing.TB) string {
	t.Helper()
	return SharedURL(t, "dynamodb")
}

// EtcdURL returns the shared test etcd store URL; without one, see
// [Missing].
func EtcdURL(t testing.TB) string {
	t.Helper()
	return SharedURL(t, "etcd")
}

// StartDynalite starts a private dynalite (in memory, so a restart loses
// its data, unless extra has "--path", DIR for LevelDB on disk). Without
// dynalite or node, see [Missing].
func StartDynalite(t testing.TB, extra ...string) *Server {
	return mustLookup("dynamodb").Start(t, extra...)
}

func startDynalite(t testing.TB, e Engine, extra ...string) *Server {
	t.Helper()
	cli := os.Getenv(e.BinVar)
	node, err := exec.LookPath("node")
	if cli == "" || err != nil {
		Missing(t, "dynalite", "$"+e.BinVar+" is empty or node is not in PATH")
	}
	s := newServer(t)
	// dynalite rethrows a request aborted by its client (ECONNRESET
	// "aborted": a killed worker, a call abandoned at its deadline) as an
	// uncaught exception and exits, where DynamoDB itself drops the
	// request; a preload script ignores exactly that error, as
	// scripts/engines.sh does for the shared server.
	preload := filepath.Join(s.Dir, "ignore-aborted.js")
	if err := os.WriteFile(preload, []byte(ignoreAborted), 0o644); err != nil {
		t.Fatal(err)
	}
	return s.launch(append([]string{node, "--require", preload, cli, "--port", strconv.Itoa(s.Port), "--host", "127.0.0.1"}, extra...)...)
}

// DynamoDBEndpoint returns the HTTP endpoint of a private dynalite.
func (s *Server) DynamoDBEndpoint() string { return fmt.Sprintf("http://127.0.0.1:%d", s.Port) }

// StartEtcd starts a private single-member etcd with its data in a
// directory that survives Restart. Without etcd, see [Missing].
func StartEtcd(t testing.TB) *Server { return mustLookup("etcd").Start(t) }

func startEtcd(t testing.TB, e Engine, _ ...string) *Server {
	t.Helper()
	bin := binary(t, e.BinVar, "etcd")
	s := newServer(t)
	peer := FreePort(t)
	client, peerURL := fmt.Sprintf("http://127.0.0.1:%d", s.Port), fmt.Sprintf("http://127.0.0.1:%d", peer)
	return s.launch(bin, "--name", "t", "--data-dir", filepath.Join(s.Dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "t="+peerURL)
}

// EtcdURL returns the store URL of a private etcd.
func (s *Server) EtcdURL() string { return fmt.Sprintf("etcd://127.0.0.1:%d", s.Port) }

const ignoreAborted = `process.on('uncaughtException', function (err) {
  if (err && err.code === 'ECONNRESET' && err.message === 'aborted') {
    console.error('enginetest: ignored a request aborted by its client');
    return;
  }
  console.error(err);
  process.exit(7);
});
`

// Chromium returns the browser for tests that drive one:
// LEASEHOLD_TEST_CHROMIUM (set by scripts/engines.sh), else a chromium on
// PATH, else Missing (a skip, or a failure where engines are required).
func Chromium(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("LEASEHOLD_TEST_CHROMIUM"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("LEASEHOLD_TEST_CHROMIUM: %v", err)
		}
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	Missing(t, "Chromium", "$LEASEHOLD_TEST_CHROMIUM is empty and there is no chromium in PATH")
	return ""
}
