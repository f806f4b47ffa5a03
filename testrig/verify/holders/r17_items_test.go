package holders

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/testrig/proctest"

	"github.com/leasehold/leasehold/testrig/verify"
	"github.com/leasehold/leasehold/testrig/verify/netfault"
)

// R17 rows for issue 25 items 8 and 12 (the other items' rows are
// TestR17Client, TestR17Run, TestR17Python and the sfn scenarios).

// pyDynamoErrors is the script of the DynamoDB client's error rows
// (issue 25 item 12). Configured by $R17_PY: check "records" (the
// client's records), "construct" (the constructor, then a try_acquire if
// it returned) or "calls" (the constructor while the endpoint answers;
// after a line on stdin, try_acquire and get). With no_credentials it
// first removes every AWS credential the environment could give. Each
// call writes a "timed" event (what, timeout, took, typ: the exception's
// class or "returned ...", err).
const pyDynamoErrors = `import json, os, sys, time
cfg = json.loads(os.environ["R17_PY"])
if cfg.get("no_credentials"):
    for k in list(os.environ):
        if k.startswith("AWS_") and k not in ("AWS_REGION", "AWS_DEFAULT_REGION"):
            del os.environ[k]
    os.environ.update(AWS_SHARED_CREDENTIALS_FILE=os.devnull, AWS_CONFIG_FILE=os.devnull,
                      AWS_EC2_METADATA_DISABLED="true")
import leasehold
import boto3, botocore.config  # imported before the timed calls: the first import is not a wait on the endpoint

def emit(**e):
    sys.stdout.write(json.dumps(e) + "\n")
    sys.stdout.flush()

def timed(what, timeout, f):
    start = time.monotonic()
    v, typ, err = None, "", ""
    try:
        v = f()
        typ = "returned " + type(v).__name__
    except Exception as e:
        typ, err = type(e).__name__, str(e)
    emit(e="timed", what=what, timeout=timeout, took=time.monotonic() - start, typ=typ, err=err)
    return v

url, T, name = cfg["url"], cfg["timeout"], cfg["name"]
check = cfg["check"]
if check == "records":
    c = leasehold.Client(url, owner="r17", timeout=T)
    def records():
        r = c.records
        return r if r is None else r.get(name)
    timed("Client(dynamodb://...).records", T, records)
elif check == "construct":
    c = timed("Client(dynamodb://...)", T, lambda: leasehold.Client(url, owner="r17", timeout=T))
    if c is not None:
        timed("try_acquire()", T, lambda: c.try_acquire(name, 5))
else:
    c = leasehold.Client(url, owner="r17", timeout=T)
    emit(e="ready")
    sys.stdin.readline()
    timed("try_acquire()", T, lambda: c.try_acquire(name, 5))
    timed("get()", T, lambda: c.get(name))
emit(e="end")
`

// TestR17PythonDynamoDBErrors is R17 for the Python DynamoDB client's own
// errors (issue 25 item 12), each a holder script against the shared test
// dynalite: Client("dynamodb://...").records raises Unsupported (the
// README's promise; it was None); with no credentials anywhere the
// constructor (or the first call) raises the client's Invalid for the
// field credentials, not a botocore exception; an endpoint where nothing
// listens, and one that accepts and never answers (a blackholed proxy),
// give Unreachable, from the constructor too, and every call returns
// within the client's timeout + callBound.
func TestR17PythonDynamoDBErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("R17 holds leases for seconds")
	}
	needPython(t, true)
	b := dynamoBackend(t)
	script := filepath.Join(t.TempDir(), "r17_dynamodb_errors.py")
	if err := os.WriteFile(script, []byte(pyDynamoErrors), 0o644); err != nil {
		t.Fatal(err)
	}
	// An address where nothing listens: a port the kernel gave, closed.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	hung := func(t *testing.T) string {
		p, err := netfault.NewProxy(b.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		if err := blackhole(p); err != nil {
			t.Fatal(err)
		}
		return p.Addr()
	}
	rows := []struct {
		fault string
		run   func(t *testing.T, r *row, tm *timer)
	}{
		{"records", func(t *testing.T, r *row, tm *timer) {
			evs := pyErrorsRun(t, r, tm, script, map[string]any{"check": "records", "url": b.direct}, nil)
			pyExpect(r, evs, "records", "UnsupportedError", "", false)
		}},
		{"no-credentials", func(t *testing.T, r *row, tm *timer) {
			evs := pyErrorsRun(t, r, tm, script, map[string]any{"check": "construct", "url": b.direct, "no_credentials": true}, nil)
			pyExpect(r, evs, "a client without credentials", "InvalidError", "invalid credentials", false)
		}},
		{"unreachable", func(t *testing.T, r *row, tm *timer) {
			for _, ep := range []struct{ what, addr string }{{"nothing listens", closed}, {"hung", hung(t)}} {
				evs := pyErrorsRun(t, r, tm, script, map[string]any{"check": "construct", "url": b.viaURL(ep.addr)}, nil)
				pyExpect(r, evs, "the constructor ("+ep.what+")", "UnreachableError", "", true)
			}
			// Constructed while the endpoint answers, then it hangs.
			p, err := netfault.NewProxy(b.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			evs := pyErrorsRun(t, r, tm, script, map[string]any{"check": "calls", "url": b.viaURL(p.Addr())}, func() {
				if err := blackhole(p); err != nil {
					t.Fatal(err)
				}
			})
			pyExpect(r, evs, "calls after the endpoint hung", "UnreachableError", "", true)
		}},
	}
	for _, rw := range rows {
		t.Run(rw.fault, func(t *testing.T) {
			t.Parallel()
			r := newRow(t, "python-client(dynamodb)", rw.fault)
			var tm timer
			rw.run(t, r, &tm)
			tm.check(r)
			r.report()
		})
	}
}

// pyErrorsRun runs pyDynamoErrors with cfg (and the client timeout
// pyClientTimeout); for check "calls", fault is called once the client
// is made, before its calls. It returns the script's "timed" events,
// each recorded on tm; a script that does not end within 30 s is killed
// and counted as a violation.
func pyErrorsRun(t *testing.T, r *row, tm *timer, script string, cfg map[string]any, fault func()) []pyev {
	t.Helper()
	r.round()
	cfg["timeout"], cfg["name"] = pyClientTimeout.Seconds(), fmt.Sprintf("r17/py-errors/%x", rand.Uint32())
	p := startPy(t, script, cfg)
	if fault != nil {
		p.waitFor(t, "ready", 1, 60*time.Second)
		fault()
		r.faults++
		if _, err := io.WriteString(p.stdin, "go\n"); err != nil {
			t.Fatal(err)
		}
	} else if cfg["check"] != "records" {
		r.faults++
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		r.violation("%s: the script had not ended 30 s after it started: %s", cfg["check"], verify.Clip(p.errs.String(), 10))
	}
	var out []pyev
	for _, e := range p.events() {
		if e.E == "timed" {
			var err error
			if e.Err != "" {
				err = fmt.Errorf("%s: %s", e.Typ, e.Err)
			}
			tm.record("Python "+e.What, time.Duration(e.Timeout*float64(time.Second)), time.Duration(e.Took*float64(time.Second)), err)
			out = append(out, e)
		}
	}
	r.op(len(out))
	if p.count("end") == 0 {
		r.violation("%s: the script did not finish: %s", cfg["check"], verify.Clip(p.errs.String(), 10))
	}
	return out
}

// pyExpect requires the calls of evs to have raised typ (its message
// starting with prefix, if given): every call with all, else the first
// that raised (a client may find a bad configuration at its first call
// rather than in its constructor); and notes what each gave.
func pyExpect(r *row, evs []pyev, what, typ, prefix string, all bool) {
	var got []string
	for _, e := range evs {
		got = append(got, fmt.Sprintf("%s: %s in %s", e.What, e.Typ, ms(time.Duration(e.Took*float64(time.Second)))))
	}
	r.note(what, 0, "%s: %s", what, strings.Join(got, ", "))
	raised := false
	for _, e := range evs {
		if !all && strings.HasPrefix(e.Typ, "returned ") {
			continue
		}
		raised = true
		if e.Typ != typ || !strings.HasPrefix(e.Err, prefix) {
			r.violation("%s: %s gave %s %q, want %s", what, e.What, e.Typ, verify.Clip(e.Err, 3), typ)
			return
		}
		if !all {
			return
		}
	}
	if !raised {
		r.violation("%s: nothing raised (%s), want %s", what, strings.Join(got, ", "), typ)
	}
}

// starvedTTL is the TTL of the starved run rows (issue 25 item 8): a kill
// margin of max(50 ms, 5 % of TTL) = 50 ms, where the lease's local
// deadline lies only TTL·1 % + 5 ms = 15 ms before the store's expiry.
const starvedTTL = time.Second

// TestR17RunStarved is R17 for `leasehold run --ttl 1s` on a machine whose
// CPUs are starved (issue 25 item 8): two busy loops per CPU run from
// when the command beats until its supervisor has exited (a few seconds
// a round). The store then hangs (a blackholed proxy), so that the lease
// runs out, and B, a Go client reaching the lease server directly, waits
// for it. Per round: no heartbeat of the command tree (a child and a
// grandchild that ignore SIGTERM and beat every 5 ms) at or after B's
// grant (0 overlaps), none at or after the local deadline (which the kill
// margin, planned before it, protects), run exits 76, B's token above the
// lost one. And `run --ttl 10ms` is a usage error (64) that names the
// minimum, takes no lease and runs nothing (it used to take the lease,
// "lose" it and exit 76).
func TestR17RunStarved(t *testing.T) {
	if testing.Short() {
		t.Skip("R17 holds leases for seconds")
	}
	proctest.MarkTrees(t)
	bin := buildLeasehold(t, "")
	srv := verify.StartTarget(t, "server")
	b := backend{name: "server", addr: srv.Addr, url: srv.URL, urlFor: srv.URLFor}
	t.Run("ttl-10ms", func(t *testing.T) {
		r := newRow(t, "run(server)", "--ttl 10ms")
		tooShort(t, r, bin, b)
		r.report()
	})
	t.Run("starved", func(t *testing.T) {
		r := newRow(t, "run(server)", "starved, ttl 1s")
		for range verify.Size(2, 6) {
			r.round()
			starvedRound(t, r, bin, b)
		}
		r.report()
	})
}

// tooShort runs `leasehold run --ttl 10ms` of a command that would beat:
// a usage error naming the minimum, no lease taken, no beat.
func tooShort(t *testing.T, r *row, bin string, b backend) {
	name := fmt.Sprintf("r17/run/ttl-10ms/%x", rand.Uint32())
	logPath := filepath.Join(t.TempDir(), "beats")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sup := startRun(t, bin, []string{envCommand + "=" + logPath + ";tree"}, "--store", b.url, "--ttl", "10ms", name, "--", exe, "-test.run=^$")
	r.faults++
	if !sup.wait(30 * time.Second) {
		r.violation("leasehold run --ttl 10ms had not exited after 30 s: %s", sup.stderr())
		return
	}
	r.op(1)
	if sup.code != 64 || !strings.Contains(sup.stderr(), "minimum of 500ms") {
		r.violation("leasehold run --ttl 10ms exited %d, want 64 (usage) naming the minimum of 500ms: %s", sup.code, verify.Clip(sup.stderr(), 5))
	}
	r.note("exit", 0, "exit %d: %s", sup.code, strings.SplitN(strings.TrimSpace(sup.stderr()), "\n", 2)[0])
	time.Sleep(200 * time.Millisecond) // a command it started would have beaten by now
	bs, err := readBeats(logPath)
	if err != nil {
		t.Fatal(err)
	}
	r.op(len(bs) + 1)
	if len(bs) > 0 {
		r.violation("the command ran: %d lines in its log", len(bs))
	}
	if rec, err := openStore(t, b.url).Get(context.Background(), name); !errors.Is(err, leasehold.ErrNotFound) {
		r.violation("the lease was taken: Get = %+v, %v; want ErrNotFound", rec, err)
	}
}

// cpuLoad starts n busy loops (sh), each in a process group of its own;
// the function it returns kills them.
func cpuLoad(t *testing.T, n int) func() {
	t.Helper()
	var cmds []*exec.Cmd
	stop := func() {
		for _, c := range cmds {
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			_ = c.Wait()
		}
		cmds = nil
	}
	for range n {
		c := exec.Command("sh", "-c", "while :; do :; done")
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := c.Start(); err != nil {
			stop()
			t.Fatal(err)
		}
		cmds = append(cmds, c)
	}
	t.Cleanup(stop)
	return stop
}

// starvedRound is one round of the starved run row.
func starvedRound(t *testing.T, r *row, bin string, b backend) {
	ctx := context.Background()
	tag := fmt.Sprintf("%x", rand.Uint32())
	name := fmt.Sprintf("r17/run/starved/%s", tag)
	logPath := filepath.Join(t.TempDir(), "beats")
	proxy, err := netfault.NewProxy(b.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	direct := openStore(t, b.url)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sup := startRun(t, bin, []string{envCommand + "=" + logPath + ";tree"}, "--store", b.urlFor(proxy.Addr()), "--ttl", starvedTTL.String(), name, "--", exe, "-test.run=^$")
	token, _ := waitBeating(t, sup, logPath)
	loaders := 2 * runtime.NumCPU()
	stopLoad := cpuLoad(t, loaders)
	defer stopLoad()
	loadFrom := time.Now()
	time.Sleep(300 * time.Millisecond) // renewals under load first
	if err := blackhole(proxy); err != nil {
		t.Fatal(err)
	}
	r.faults += 2 // the load, the hang
	dUp, _, err := deadlineBound(ctx, direct, name)
	if err != nil {
		t.Fatalf("read %s from the store: %v", name, err)
	}
	b2, err := leasehold.New(direct, leasehold.WithOwner("r17-b-"+tag))
	if err != nil {
		t.Fatal(err)
	}
	bctx, cancel := context.WithTimeout(ctx, 3*starvedTTL+10*time.Second)
	lb, err := b2.Acquire(bctx, name, leasehold.TTL(time.Minute))
	cancel()
	grantAt := verify.Mono()
	if err != nil {
		t.Fatalf("B could not take %s: %v", name, err)
	}
	if !sup.wait(10 * time.Second) {
		r.violation("leasehold run had not exited 10 s after B took its lease: %s", sup.stderr())
	}
	stopLoad()
	loadFor := time.Since(loadFrom)
	r.op(2)
	if sup.code != 76 {
		r.violation("leasehold run exited %d, want 76: %s", sup.code, verify.Clip(sup.stderr(), 5))
	}
	if lb.Token() <= token {
		r.violation("B's token %d is not above the lost one %d", lb.Token(), token)
	}
	if err := lb.Release(ctx); err != nil {
		t.Errorf("B's release: %v", err)
	}
	if err := proxy.Heal(); err != nil {
		t.Fatal(err)
	}
	bs, err := readBeats(logPath)
	if err != nil {
		t.Fatal(err)
	}
	r.op(len(bs))
	afterGrant, afterDeadline := 0, 0
	for _, x := range bs {
		if x.Token != token {
			continue
		}
		if x.T >= grantAt {
			afterGrant++
		}
		if x.T >= dUp {
			afterDeadline++
		}
	}
	last := lastBeat(bs, token, "")
	if afterGrant > 0 {
		r.violation("%d heartbeats of the command at or after B's grant (the last %s after it): overlap", afterGrant, ms(time.Duration(last-grantAt)))
	}
	if afterDeadline > 0 {
		r.violation("%d heartbeats of the command after the local deadline (the last %s after it; kill margin %s)", afterDeadline, ms(time.Duration(last-dUp)), ms(killMargin(starvedTTL)))
	}
	r.note("last", last-dUp, "the command's last heartbeat %s the local deadline (the store's expiry − TTL·1 %% − 5 ms; kill margin %s), %s B's grant",
		signed(time.Duration(last-dUp), "after", "before"), ms(killMargin(starvedTTL)), signed(time.Duration(last-grantAt), "after", "before"))
	r.note("load", 0, "%d busy loops on %d CPUs for %s a round", loaders, runtime.NumCPU(), loadFor.Round(100*time.Millisecond))
}
