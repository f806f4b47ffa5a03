package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/stores"
	"github.com/leasehold/leasehold/testrig/enginetest"
	"github.com/leasehold/leasehold/testrig/proctest"
)

// AllStores names every store a suite can run on: the rows of
// enginetest.Engines, the one table of stores (add a store there). "server"
// is a `leasehold serve` process (its own durable log) reached over RESP.
var AllStores = enginetest.Stores()

// Networked returns the stores of AllStores that clients reach over a
// network (all but the Embedded ones).
func Networked() []string {
	var out []string
	for _, e := range enginetest.Engines {
		if e.Kind != enginetest.Embedded {
			out = append(out, e.Store)
		}
	}
	return out
}

// RedisAsRun names the Redis targets configured as most Redis servers run,
// losing acknowledged writes when killed: "redis-nopersist" (no RDB, no
// AOF: a restart loses everything) and "redis-rdb" (RDB snapshots after
// every second with a change, no AOF: a restart goes back to the last
// snapshot). The store's restart detection, hold-back and token floor are
// then all that keeps grants exclusive and tokens increasing. Suites R3
// and R5 run them; they are not in AllStores.
var RedisAsRun = []string{"redis-nopersist", "redis-rdb"}

// asRun are the RedisAsRun targets' redis-server arguments (instead of the
// row's Durable ones).
var asRun = map[string][]string{
	"redis-nopersist": {"--save", "", "--appendonly", "no"},    // no snapshots
	"redis-rdb":       {"--save", "1 1", "--appendonly", "no"}, // a snapshot after every second with a change
}

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
	// HTTPAddr is the lease server's HTTP API (host:port): "" but for
	// StartServe's targets.
	HTTPAddr string
	// Dir is the engine's own directory (its data and server.log), for a
	// failure's report: "" for the embedded store and the lease server.
	Dir string
	// Engine is the store's row of enginetest.Engines (for a proxy
	// target, the lease server's, with the MinTTL of the store behind).
	Engine enginetest.Engine
}

// Embedded reports whether the store runs inside its clients.
func (t Target) Embedded() bool { return t.Kill == nil }

// Fit adapts a suite's store URL and lease TTL to the target's store, all
// of whose clients run on this machine's clock: a TTL below the store's
// MinTTL is raised to it, and the URL gets the store's SameClock parameter
// (a takeover need not wait out a clock skew). note says what changed,
// "" if nothing did.
func (t Target) Fit(url string, ttl time.Duration) (string, time.Duration, string) {
	var notes []string
	if e := t.Engine; e.MinTTL > ttl {
		ttl = e.MinTTL
		notes = append(notes, fmt.Sprintf("TTL %s: %s's minimum lease TTL", ttl, e.Store))
	}
	if p := t.Engine.SameClock; p != "" {
		url += p
		notes = append(notes, strings.TrimPrefix(p, "&"))
	}
	return url, ttl, strings.Join(notes, "; ")
}

// StartTarget starts a private instance of the named store (a row of
// enginetest.Engines, or one of RedisAsRun), configured to keep
// acknowledged writes across a SIGKILL of its process (the row's Durable
// arguments: Redis with appendfsync always, dynalite on disk) — except the
// RedisAsRun targets, which lose them — and stops it when the test ends.
// It skips the test when the engine is not installed.
func StartTarget(t testing.TB, name string) Target {
	t.Helper()
	row := name
	if _, ok := asRun[name]; ok {
		row = "redis"
	}
	e, ok := enginetest.Lookup(row)
	if !ok {
		t.Fatalf("unknown store %q (known: %v, %v)", name, AllStores, RedisAsRun)
	}
	switch e.Kind {
	case enginetest.Embedded:
		return Target{Name: name, URL: e.URL(t.TempDir()), Engine: e}
	case enginetest.LeaseServer:
		return serverTarget(t)
	}
	urlFor := e.URL
	args, asRunning := asRun[name]
	if asRunning {
		hb := "holdback=" + RedisAsRunHoldback.String()
		urlFor = func(addr string) string { return e.URL(addr) + "?" + hb }
	} else if e.Durable != nil {
		args = e.Durable(t)
		if e.DurableParam != "" {
			urlFor = func(addr string) string { return e.URL(addr) + e.DurableParam }
		}
	}
	s := e.Start(t, args...)
	addr := "127.0.0.1:" + strconv.Itoa(s.Port)
	tg := Target{Name: name, URL: urlFor(addr), Addr: addr, URLFor: urlFor, Engine: e, Dir: s.Dir,
		Kill: s.Kill, Start: s.Start,
		Pause:  func() { s.Signal(syscall.SIGSTOP) },
		Resume: func() { s.Signal(syscall.SIGCONT) },
	}
	if e.Init { // once here, not in every worker
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := stores.Init(ctx, tg.URL); err != nil {
			t.Fatalf("initialise the store: %v", err)
		}
	}
	if e.DurableParam != "" && !asRunning {
		waitFirstUse(t, tg.URL)
	}
	return tg
}

// waitFirstUse waits until the store at url grants a probe name (released
// again): a Redis declared never replicated holds back its first use
// until a hold-back after the server's start (its marker is missing, as
// after a lost data set), and every refusal of that hold-back would be an
// indeterminate acquire in a suite's history.
func waitFirstUse(t testing.TB, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := stores.Open(ctx, url)
	if err != nil {
		t.Fatalf("open the store: %v", err)
	}
	defer s.Close()
	req := leasehold.AcquireRequest{Name: "verify-first-use", Owner: "verify", TTL: time.Second}
	for {
		rec, err := s.TryAcquire(ctx, req)
		if err == nil {
			_ = s.Release(ctx, req.Name, req.Owner, rec.Token)
			return
		}
		var he *leasehold.HeldError
		if !errors.As(err, &he) || he.Token != 0 || ctx.Err() != nil {
			t.Fatalf("first use of the store: %v", err)
		}
		time.Sleep(min(max(he.Remaining, 10*time.Millisecond), time.Second))
	}
}

// EnvCLI makes a process started by StartCLI run the leasehold command
// line with these arguments (a JSON array) instead of the tests.
const EnvCLI = "LEASEHOLD_VERIFY_CLI"

// serverTarget runs `leasehold serve` with its own log in a data directory
// that survives restarts; workers reach it over RESP (leasehold://).
func serverTarget(t testing.TB) Target {
	t.Helper()
	return StartServe(t, "--data-dir", t.TempDir())
}

// StartServe runs `leasehold serve` with args added (its store: --data-dir
// or --store; --workflows ...) as a process of the current test binary
// (EnvCLI), and returns it as a target reached over RESP once it is ready;
// HTTPAddr is its HTTP API. Kill and Start stop and restart it with the
// same arguments (same addresses and data); it is killed when the test
// ends.
func StartServe(t testing.TB, args ...string) Target {
	t.Helper()
	addrs := proctest.FreeAddrs(t, 2)
	respAddr, httpAddr := addrs[0], addrs[1]
	args = append([]string{"serve", "--addr", httpAddr, "--resp-addr", respAddr, "--log-level", "warn"}, args...)
	p := &cliProc{t: t, args: args,
		ready: func() bool { return proctest.Ready("http://" + httpAddr + "/readyz") }}
	p.start()
	t.Cleanup(p.kill)
	e, _ := enginetest.Lookup("server")
	urlFor := e.URL
	return Target{Name: "server", URL: urlFor(respAddr), Addr: respAddr, URLFor: urlFor, Engine: e, HTTPAddr: httpAddr,
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
	tg := StartServe(t, "--store", inner.URL)
	tg.Name = "server(" + inner.Name + ")"
	tg.Engine.MinTTL = inner.Engine.MinTTL // the server keeps its store's leases
	return tg
}

// cliProc is a leasehold command-line process: the current executable run
// with EnvCLI, which MaybeWorker turns into the CLI.
type cliProc struct {
	t     testing.TB
	args  []string
	ready func() bool
	cmd   *exec.Cmd
}

// CLICommand returns the command that runs this test binary as the
// leasehold command line with args (EnvCLI; the test's TestMain must call
// MaybeWorker first), its stderr going to the test's.
func CLICommand(ctx context.Context, args ...string) (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(args)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), EnvCLI+"="+string(raw))
	cmd.Stderr = os.Stderr
	return cmd, nil
}

func (p *cliProc) start() {
	p.t.Helper()
	cmd, err := CLICommand(context.Background(), p.args...)
	if err != nil {
		p.t.Fatal(err)
	}
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
