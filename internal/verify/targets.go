package verify

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/dynamodb"
	"github.com/leasehold/leasehold/internal/enginetest"
)

// AllStores names every store a suite can run on. "server" is a
// `leasehold serve` process (its own durable log) reached over RESP.
var AllStores = []string{"sqlite", "redis", "postgres", "dynamodb", "etcd", "server"}

// RedisAsRun names the Redis targets configured as most Redis servers run,
// losing acknowledged writes when killed: "redis-nopersist" (no RDB, no
// AOF: a restart loses everything) and "redis-rdb" (RDB snapshots after
// every second with a change, no AOF: a restart goes back to the last
// snapshot). The store's restart detection, hold-back and token floor are
// then all that keeps grants exclusive and tokens increasing. Suites R3
// and R5 run them; they are not in AllStores.
var RedisAsRun = []string{"redis-nopersist", "redis-rdb"}

// RedisAsRunHoldback is the hold-back the RedisAsRun targets' URLs give the
// store: suites that use them must not use a longer TTL.
const RedisAsRunHoldback = time.Second

// Target is a store under test, with the controls a fault suite needs.
// Embedded stores (sqlite) have no engine process: Kill, Start, Pause and
// Resume are nil and Addr is empty.
type Target struct {
	Name string
	URL  string // store URL for workers
	// Addr is the engine's client address (host:port); URLFor gives the
	// store URL through another address (a TCP proxy in front of Addr).
	Addr   string
	URLFor func(addr string) string
	Kill   func() // SIGKILL every process of the engine
	Start  func() // start it again (same port and data) after Kill
	Pause  func() // SIGSTOP
	Resume func() // SIGCONT
}

// Embedded reports whether the store runs inside its clients.
func (t Target) Embedded() bool { return t.Kill == nil }

// StartTarget starts a private instance of the named store, configured to
// keep acknowledged writes across a SIGKILL of its process (Redis with
// appendfsync always, dynalite on disk) — except the RedisAsRun targets,
// which lose them — and stops it when the test ends. It skips the test
// when the engine is not installed.
func StartTarget(t testing.TB, name string) Target {
	t.Helper()
	switch name {
	case "sqlite":
		u := "sqlite://" + filepath.Join(t.TempDir(), "leases.db")
		return Target{Name: name, URL: u}
	case "redis":
		s := enginetest.StartRedis(t, "--appendonly", "yes", "--appendfsync", "always")
		return engineTarget(name, s, func(addr string) string { return "redis://" + addr + "/0" })
	case "redis-nopersist", "redis-rdb":
		save := "" // no snapshots
		if name == "redis-rdb" {
			save = "1 1" // a snapshot after every second with a change
		}
		s := enginetest.StartRedis(t, "--save", save, "--appendonly", "no")
		hb := "holdback=" + RedisAsRunHoldback.String()
		return engineTarget(name, s, func(addr string) string { return "redis://" + addr + "/0?" + hb })
	case "postgres":
		s := enginetest.StartPostgres(t)
		return engineTarget(name, s, func(addr string) string {
			return "postgres://postgres@" + addr + "/postgres?sslmode=disable&connect_timeout=5"
		})
	case "dynamodb":
		dir := t.TempDir()
		keepDynaliteUp(t)
		s := enginetest.StartDynalite(t, "--path", dir)
		tg := engineTarget(name, s, func(addr string) string {
			return "dynamodb://lh_verify?endpoint=http://" + addr + "&region=us-east-1"
		})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := dynamodb.Init(ctx, tg.URL); err != nil { // create the table once, not in every worker
			t.Fatalf("create the table: %v", err)
		}
		return tg
	case "etcd":
		s := enginetest.StartEtcd(t)
		return engineTarget(name, s, func(addr string) string { return "etcd://" + addr })
	case "server":
		return serverTarget(t)
	}
	t.Fatalf("unknown store %q (known: %v, %v)", name, AllStores, RedisAsRun)
	return Target{}
}

// keepDynaliteUp keeps dynalite (the engine behind the "dynamodb" target)
// from exiting when a client closes its connection before the request was
// read to the end (a worker killed, a call abandoned at its deadline, a TCP
// reset): dynalite rethrows the request's "aborted" error (ECONNRESET) as
// an uncaught exception, where DynamoDB itself would drop the request. A
// preload script, passed to node in NODE_OPTIONS for the rest of the test,
// ignores exactly that error.
func keepDynaliteUp(t testing.TB) {
	t.Helper()
	preload := filepath.Join(t.TempDir(), "ignore-aborted.js")
	js := `process.on('uncaughtException', function (err) {
  if (err && err.code === 'ECONNRESET' && err.message === 'aborted') {
    console.error('verify: ignored a request aborted by its client');
    return;
  }
  console.error(err);
  process.exit(7);
});
`
	if err := os.WriteFile(preload, []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := os.Getenv("NODE_OPTIONS")
	if opts != "" {
		opts += " "
	}
	t.Setenv("NODE_OPTIONS", opts+"--require "+strconv.Quote(preload))
}

func engineTarget(name string, s *enginetest.Server, urlFor func(string) string) Target {
	addr := "127.0.0.1:" + strconv.Itoa(s.Port)
	return Target{Name: name, URL: urlFor(addr), Addr: addr, URLFor: urlFor,
		Kill: s.Kill, Start: s.Start,
		Pause:  func() { s.Signal(syscall.SIGSTOP) },
		Resume: func() { s.Signal(syscall.SIGCONT) },
	}
}

// EnvCLI makes a process started by StartCLI run the leasehold command
// line with these arguments (a JSON array) instead of the tests.
const EnvCLI = "LEASEHOLD_VERIFY_CLI"

// serverTarget runs `leasehold serve` with its own log in a data directory
// that survives restarts; workers reach it over RESP (leasehold://).
func serverTarget(t testing.TB) Target {
	t.Helper()
	return startServe(t, "--data-dir", t.TempDir())
}

func startServe(t testing.TB, args ...string) Target {
	t.Helper()
	respAddr, httpAddr := freeAddr(t), freeAddr(t)
	args = append([]string{"serve", "--addr", httpAddr, "--resp-addr", respAddr, "--log-level", "warn"}, args...)
	p := &cliProc{t: t, args: args,
		ready: func() bool {
			resp, err := http.Get("http://" + httpAddr + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}}
	p.start()
	t.Cleanup(p.kill)
	urlFor := func(addr string) string { return "leasehold://" + addr }
	return Target{Name: "server", URL: urlFor(respAddr), Addr: respAddr, URLFor: urlFor,
		Kill: p.kill, Start: p.start,
		Pause:  func() { p.signal(syscall.SIGSTOP) },
		Resume: func() { p.signal(syscall.SIGCONT) },
	}
}

// ProxyTarget runs `leasehold serve --store inner.URL` (the server in front
// of another store) and returns it as a target named "server(<inner>)".
// Its Kill, Start, Pause and Resume act on the server process, not on the
// store behind it.
func ProxyTarget(t testing.TB, inner Target) Target {
	t.Helper()
	tg := startServe(t, "--store", inner.URL)
	tg.Name = "server(" + inner.Name + ")"
	return tg
}

func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// cliProc is a leasehold command-line process: the current executable run
// with EnvCLI, which MaybeWorker turns into the CLI.
type cliProc struct {
	t     testing.TB
	args  []string
	ready func() bool
	cmd   *exec.Cmd
}

func (p *cliProc) start() {
	p.t.Helper()
	exe, err := os.Executable()
	if err != nil {
		p.t.Fatal(err)
	}
	raw := "["
	for i, a := range p.args {
		if i > 0 {
			raw += ","
		}
		raw += strconv.Quote(a)
	}
	raw += "]"
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), EnvCLI+"="+raw)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("start leasehold %v: %v", p.args, err)
	}
	p.cmd = cmd
	for deadline := time.Now().Add(60 * time.Second); !p.ready(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			p.kill()
			p.t.Fatalf("leasehold %v not ready after 60s", p.args)
		}
	}
}

func (p *cliProc) signal(sig syscall.Signal) {
	if p.cmd != nil {
		_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	}
}

func (p *cliProc) kill() {
	if p.cmd == nil {
		return
	}
	p.signal(syscall.SIGKILL)
	_ = p.cmd.Wait()
	p.cmd = nil
}
