package holders

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/testrig/enginetest"
	"github.com/leasehold/leasehold/testrig/proctest"
	"github.com/leasehold/leasehold/testrig/verify"
	"github.com/leasehold/leasehold/testrig/verify/netfault"
)

// python is the interpreter the Python rows run the holder script with.
const python = "/usr/bin/python3"

// pyClientTimeout is the Python client's own timeout (Client(timeout=)):
// it bounds the calls without a timeout of their own (get, try_acquire,
// release), and each renewal: above the late rows' renewal window (1.97 s).
const pyClientTimeout = 2 * time.Second

// pyHolder is the Python rows' holder script. Configured by $R17_PY
// (JSON), it takes the lease through leasehold.Client (the URL is the
// proxy's) and works in 5 ms steps while lease.held says so; it writes
// one JSON line per event on stdout, times on time.monotonic_ns()
// (CLOCK_MONOTONIC, as verify.Mono):
//
//   - "grant" (t, tok, d: the model's local deadline), "dl" (d: a later
//     one, a renewal confirmed before the last), "cdl" (d: the client's own
//     Lease.deadline, when it changes): the model's deadline is t0 taken
//     just before each request is sent (after the client's own t0, so it
//     is never earlier than the client's) + ttl·(1−ρ) − ε, moved on only by
//     a renewal confirmed before it, as the Go rows' probe;
//   - "work" (t: asked lease.held, t1: told yes);
//   - "lost" (t: on_lost was called, err, typ);
//   - "timed" (what, timeout, took in seconds, err, rid: the request id an
//     Unreachable named), calls with timeouts made after the loss, while
//     the fault is still on;
//   - "faultdone"; then it waits for a line on stdin (the next holder has
//     the lease) and uses the lost grant: "reuse" (use: what, ok, err);
//     "end".
//
// With ignore_lost it does not look at held and works on for 500 ms after
// on_lost (the control: the checks must catch it).
const pyHolder = `import json, os, sys, threading, time
import leasehold
from leasehold import errors as E

cfg = json.loads(os.environ["R17_PY"])
name, ttl = cfg["name"], cfg["ttl"]
mu = threading.Lock()

def emit(**e):
    with mu:
        sys.stdout.write(json.dumps(e) + "\n")
        sys.stdout.flush()

mono = time.monotonic_ns
c = leasehold.Client(cfg["url"], owner=cfg["owner"], timeout=cfg["timeout"])
w = leasehold.Client(cfg["url"], owner=cfg["owner"] + "-w", timeout=cfg["timeout"])
model = {"tok": 0, "dl": 0}
life = lambda t: int(c._life(t) * 1e9)

orig_renew = c._renew
def renew(n, owner, token, t, timeout, **kw):
    t0 = mono()
    orig_renew(n, owner, token, t, timeout, **kw)
    t1 = mono()
    with mu:
        ok = n == name and token == model["tok"] and t1 < model["dl"]
        if ok:
            model["dl"] = t0 + life(t)
    if ok:
        emit(e="dl", tok=token, d=model["dl"], t=t1)
c._renew = renew

if hasattr(c, "_grant"):  # DynamoDBClient
    orig_grant = c._grant
    def grant(n, rid, ttl_ms, data, end):
        t0 = mono()
        tok, acq = orig_grant(n, rid, ttl_ms, data, end)
        if n == name:
            with mu:
                model["tok"], model["dl"] = tok, t0 + life(ttl_ms / 1000)
        return tok, acq
    c._grant = grant
else:
    orig_post = c._post_acquire
    def post(path, body, n, wait, timeout=None):
        t0 = mono()
        info = orig_post(path, body, n, wait, timeout)
        if n == name:
            with mu:
                model["tok"], model["dl"] = info.token, t0 + life(ttl)
        return info
    c._post_acquire = post

# Another lease, held all along by a third client: an acquire of it with
# a timeout waits.
h = leasehold.Client(cfg["url"], owner=cfg["owner"] + "-c", timeout=10)
h.acquire(name + "/held", 60, timeout=30, keepalive=False)
try:
    w.get(name + "/held")  # the waiter's first request (DynamoDB: the table's description) before any fault
except E.LeaseholdError:
    pass

lost = threading.Event()
lost_at = [0]
def on_lost(lease, err):
    lost_at[0] = mono()
    emit(e="lost", t=lost_at[0], err=str(err), typ=type(err).__name__)
    lost.set()

lease = c.acquire(name, ttl, timeout=30, on_lost=on_lost)
emit(e="grant", t=mono(), tok=lease.token, d=model["dl"])
cdl = None
while True:
    t0 = mono()
    if cfg.get("ignore_lost"):
        if lost.is_set() and t0 > lost_at[0] + 500_000_000:
            break
    elif not lease.held:
        break
    t1 = mono()
    emit(e="work", t=t0, t1=t1)
    d = lease.deadline
    if d != cdl:
        cdl = d
        emit(e="cdl", d=int(d * 1e9))
    time.sleep(0.005)
lost.wait(60)

def timed(what, timeout, f):
    start = time.monotonic()
    err, rid = "", ""
    try:
        f()
    except Exception as e:
        err, rid = type(e).__name__ + ": " + str(e), getattr(e, "request_id", "") or ""
    emit(e="timed", what=what, timeout=timeout, took=time.monotonic() - start, err=err, rid=rid)

def acquire_free():
    l = w.acquire(name + "/free", ttl, timeout=0.6)
    l.release()

def acquire_held():
    l = w.acquire(name + "/held", ttl, timeout=1.2)
    l.release()
    raise RuntimeError("granted a lease another client holds")

def try_other():
    w.try_acquire(name + "/other", ttl).release()

ct = cfg["timeout"]
calls = [("acquire(timeout=0.6) of a free lease", 0.6, acquire_free),
         ("acquire(timeout=1.2) of a held lease", 1.2, acquire_held),
         ("Lease.release() after the loss", ct, lease.release),
         ("get()", ct, lambda: w.get(name)),
         ("try_acquire()", ct, try_other)]
ts = [threading.Thread(target=timed, args=a) for a in calls]
for t in ts:
    t.start()
for t in ts:
    t.join()
emit(e="faultdone")
sys.stdin.readline()

tok, secret = lease.token, lease.info.secret
def use(what, f, ok, again=True):
    for _ in range(5 if again else 1):
        try:
            f()
            err = None
        except Exception as e:
            err = e
        if not isinstance(err, E.Unreachable):
            break
        time.sleep(0.1)
    emit(e="reuse", use={"what": what, "ok": bool(ok(err)), "err": "" if err is None else type(err).__name__ + ": " + str(err)})

ran = []
def with_block():
    with lease:
        ran.append(1)
use("Lease.renew", lease.renew, lambda e: isinstance(e, E.Lost))
use("Lease.release", lease.release, lambda e: e is None or isinstance(e, E.Lost))
use("with on the lost Lease", with_block, lambda e: not ran and isinstance(e, (E.Lost, E.Released)))
use("renew with the lost token", lambda: orig_renew(name, c.owner, tok, ttl, 5.0, secret=secret),
    lambda e: isinstance(e, E.NotHeld))
use("release with the lost token", lambda: c._release(name, c.owner, tok, secret=secret, timeout=5.0),
    lambda e: isinstance(e, E.NotHeld))
emit(e="end", t=mono())
`

// pyev is one line of the holder script.
type pyev struct {
	E       string  `json:"e"`
	T       int64   `json:"t"`
	T1      int64   `json:"t1"`
	Tok     uint64  `json:"tok"`
	D       int64   `json:"d"`
	Err     string  `json:"err"`
	Typ     string  `json:"typ"`
	What    string  `json:"what"`
	Timeout float64 `json:"timeout"`
	Took    float64 `json:"took"`
	Rid     string  `json:"rid"`
	Use     *reused `json:"use"`
}

// pyBackend is a store the Python client reaches through a fault proxy in
// front of addr: the lease server's HTTP API or DynamoDB (dynalite).
type pyBackend struct {
	name   string // "server", "dynamodb"
	addr   string
	direct string                   // its Go store URL, direct
	viaURL func(addr string) string // the Python client's URL through a proxy at addr
}

// needPython fails (engines required) or skips the test without
// /usr/bin/python3, or without boto3 if boto is set.
func needPython(t *testing.T, boto bool) {
	t.Helper()
	if _, err := os.Stat(python); err != nil {
		enginetest.Missing(t, "python3", python+": "+err.Error())
	}
	if boto {
		if out, err := exec.Command(python, "-c", "import boto3").CombinedOutput(); err != nil {
			enginetest.Missing(t, "boto3", fmt.Sprintf("%s cannot import boto3 (apt-get install python3-boto3): %v: %s", python, err, strings.TrimSpace(string(out))))
		}
	}
}

// pythonPath is clients/python, from this package's directory (the
// test's working directory).
func pythonPath(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", "..", "clients", "python"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(p, "leasehold", "__init__.py")); err != nil {
		t.Fatalf("the Python client is not at %s: %v", p, err)
	}
	return p
}

// startServe runs `leasehold serve` (bin) with its HTTP API on a port of
// the kernel's choosing, as clients/python/tests/server.py does, and
// returns that address.
func startServe(t *testing.T, bin string) string {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--resp-addr", "", "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--no-sync", "--log-level", "warn")
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		pw.Close()
	})
	found := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`HTTP API on http://(127\.0\.0\.1:\d+)/v1/`)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
	}()
	select {
	case addr := <-found:
		return addr
	case <-time.After(30 * time.Second):
		t.Fatal("leasehold serve did not announce its HTTP API in 30 s")
	}
	return ""
}

// pyProc is a running holder script and what it wrote.
type pyProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	mu    sync.Mutex
	evs   []pyev
	errs  proctest.Buffer
	done  chan struct{}
}

func startPy(t *testing.T, script string, cfg map[string]any) *pyProc {
	t.Helper()
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := &pyProc{done: make(chan struct{})}
	p.cmd = exec.Command(python, script)
	p.cmd.Env = append(os.Environ(), "PYTHONPATH="+pythonPath(t), "R17_PY="+string(raw), "PYTHONUNBUFFERED=1")
	if os.Getenv("AWS_ACCESS_KEY_ID") == "" {
		p.cmd.Env = append(p.cmd.Env, "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test")
	}
	p.cmd.Stderr = &p.errs
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var e pyev
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				p.mu.Lock()
				p.evs = append(p.evs, e)
				p.mu.Unlock()
			}
		}
		_ = p.cmd.Wait()
	}()
	return p
}

func (p *pyProc) events() []pyev {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]pyev(nil), p.evs...)
}

func (p *pyProc) count(e string) int {
	n := 0
	for _, ev := range p.events() {
		if ev.E == e {
			n++
		}
	}
	return n
}

// waitFor waits until the script has written n events of kind e.
func (p *pyProc) waitFor(t *testing.T, e string, n int, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); p.count(e) < n; time.Sleep(10 * time.Millisecond) {
		select {
		case <-p.done:
			t.Fatalf("the Python holder exited before %d %q events: %s", n, e, p.errs.String())
		default:
		}
		if time.Now().After(end) {
			t.Fatalf("the Python holder wrote no %d %q events in %s: %s", n, e, d, p.errs.String())
		}
	}
}

// The Python rows' faults (faultHang, faultLate, faultStop) and TTLs:
// as the Go client rows (clientTTL; lateTTL with lateHeld, then lateLost).
//
// TestR17Python is R17 for the Python leasehold.Client: over the lease
// server's HTTP API (a `leasehold serve` built from the module) and over
// DynamoDB (the shared test dynalite), each through a fault proxy. The
// holder is a Python script (pyHolder) run by /usr/bin/python3 with
// PYTHONPATH at clients/python. Per row, the Go rows' checks: on_lost by
// the local deadline + lossBound (a stop: lossBound after the resume), no
// work step after the deadline or the loss, no overlap with the next
// holder (B, a Go client, direct), every Python call with a timeout back
// within it + callBound (and an Unreachable naming its request id), and the
// lost grant refused: Lease.renew raises Lost, Lease.release is harmless,
// a with block on it raises and does not run, a renew and a release with
// its token are refused (NotHeld), a fenced write with it is refused.
func TestR17Python(t *testing.T) {
	if testing.Short() {
		t.Skip("R17 holds leases for seconds")
	}
	needPython(t, false)
	script := filepath.Join(t.TempDir(), "r17_holder.py")
	if err := os.WriteFile(script, []byte(pyHolder), 0o644); err != nil {
		t.Fatal(err)
	}
	srvAddr := startServe(t, buildLeasehold(t, ""))
	httpURL := func(addr string) string { return "http://" + addr }
	server := pyBackend{name: "server", addr: srvAddr, direct: httpURL(srvAddr), viaURL: httpURL}
	rows := []struct {
		b     func(t *testing.T) pyBackend
		fault string
	}{
		{func(*testing.T) pyBackend { return server }, faultHang},
		{func(*testing.T) pyBackend { return server }, faultLate},
		{func(*testing.T) pyBackend { return server }, faultStop},
		{dynamoBackend, faultHang},
	}
	for i, rw := range rows {
		sub := "server/" + rw.fault
		if i == len(rows)-1 {
			sub = "dynamodb/" + rw.fault
		}
		t.Run(sub, func(t *testing.T) {
			t.Parallel()
			b := rw.b(t)
			r := newRow(t, "python-client("+b.name+")", rw.fault)
			pyRound(t, r, b, script, rw.fault, false)
			r.report()
		})
	}
	// The control, alongside: the hang row on the server with a holder
	// that ignores on_lost and lease.held and works on for 500 ms after
	// its loss must be caught (work steps after the deadline, an overlap
	// with B).
	t.Run("control", func(t *testing.T) {
		t.Parallel()
		r := newRow(t, "python-client(server)", faultHang+", on_lost ignored")
		r.expectBad = true
		pyRound(t, r, server, script, faultHang, true)
		caught := 0
		for _, v := range r.bad {
			if strings.Contains(v, "work steps") {
				caught = 1
			}
		}
		verify.Report(t, verify.Row{Suite: "R17-control", Store: r.name(), Ops: r.ops, Faults: r.faults, Violations: r.violations(),
			Checker: fmt.Sprintf("caught %d/1", caught), Note: fmt.Sprintf("%d violations found, first: %s", r.violations(), first(r.bad))})
		if caught == 0 {
			t.Errorf("a Python holder that ignores on_lost was not caught")
		}
	})
}

// dynamoBackend is the shared test dynalite (its table, the Python client
// sharing it with the Go store).
func dynamoBackend(t *testing.T) pyBackend {
	t.Helper()
	needPython(t, true)
	du := enginetest.DynamoDBURL(t)
	u, err := url.Parse(du)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := url.Parse(u.Query().Get("endpoint"))
	if err != nil || ep.Host == "" {
		t.Fatalf("%s: no endpoint host: %v", du, err)
	}
	return pyBackend{name: "dynamodb", addr: ep.Host, direct: du, viaURL: func(addr string) string {
		v := *u
		q := v.Query()
		q.Set("endpoint", "http://"+addr)
		v.RawQuery = q.Encode()
		return v.String()
	}}
}

// pyRound is one round of a Python row.
func pyRound(t *testing.T, r *row, b pyBackend, script, fault string, ignoreLost bool) {
	r.round()
	ctx := context.Background()
	proxy, err := netfault.NewProxy(b.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	direct := openStore(t, b.direct)
	tag := fmt.Sprintf("%x", rand.Uint32())
	name := fmt.Sprintf("r17/py-%s/%s/%s", b.name, fault, tag)
	ttl := clientTTL
	if fault == faultLate {
		ttl = lateTTL
	}
	or := newOracle(t)
	p := startPy(t, script, map[string]any{"url": b.viaURL(proxy.Addr()), "name": name, "owner": "r17-py-" + tag,
		"ttl": ttl.Seconds(), "timeout": pyClientTimeout.Seconds(), "ignore_lost": ignoreLost})
	p.waitFor(t, "work", 20, 60*time.Second)
	var token uint64
	for _, e := range p.events() {
		if e.E == "grant" {
			token = e.Tok
		}
	}
	if err := or.write(ctx, or.o.URL(), name, "a", token); err != nil {
		t.Errorf("A's first fenced write (token %d): %v", token, err)
	}

	b2, err := leasehold.New(direct, leasehold.WithOwner("r17-b-"+tag))
	if err != nil {
		t.Fatal(err)
	}
	bch := make(chan granted, 1)
	takeB := func() {
		go func() {
			bctx, cancel := context.WithTimeout(ctx, 4*ttl+10*time.Second)
			defer cancel()
			lb, err := b2.Acquire(bctx, name, leasehold.TTL(time.Minute))
			g := granted{l: lb, from: verify.Mono(), err: err}
			if err == nil {
				g.werr = or.write(ctx, or.o.URL(), name, "b", lb.Token())
			}
			bch <- g
		}()
	}
	var lateFrom, lateTo, stopAt, contAt int64
	switch fault {
	case faultHang:
		if err := blackhole(proxy); err != nil {
			t.Fatal(err)
		}
		r.faults++
		takeB()
	case faultLate:
		if err := late(proxy, lateHeld); err != nil {
			t.Fatal(err)
		}
		lateFrom = verify.Mono()
		time.Sleep(3 * ttl / 2)
		if err := proxy.Heal(); err != nil {
			t.Fatal(err)
		}
		if err := late(proxy, lateLost); err != nil {
			t.Fatal(err)
		}
		lateTo = verify.Mono()
		r.faults += 2
		takeB()
	case faultStop:
		pid := p.cmd.Process.Pid
		stopAt = verify.Mono()
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		r.faults++
		takeB()
		time.Sleep(time.Duration(stopAt + int64(2*ttl) - verify.Mono()))
		contAt = verify.Mono()
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	// The script makes its timed calls after its loss, the fault still on.
	p.waitFor(t, "faultdone", 1, life(ttl)+lossBound+30*time.Second)
	var g granted
	select {
	case g = <-bch:
	case <-time.After(4*ttl + 20*time.Second):
		t.Fatalf("B's acquire of %s did not return", name)
	}
	if g.err != nil {
		t.Fatalf("B could not take %s after A's loss: %v", name, g.err)
	}
	lb := g.l
	r.op(1)
	if fault == faultStop && g.from > contAt {
		t.Errorf("B was granted the lease only after A was continued: the round did not test a takeover")
	}
	if lb.Token() <= token {
		r.violation("B's token %d is not above A's lost one %d", lb.Token(), token)
	}
	if g.werr != nil {
		r.violation("B's fenced write (token %d): %v", lb.Token(), g.werr)
	}
	if err := proxy.Heal(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(p.stdin, "reuse\n"); err != nil {
		t.Fatalf("tell the Python holder to use its lost grant: %v", err)
	}
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		r.violation("the Python holder did not finish 60 s after it was told to use its lost grant: %s", p.errs.String())
	}
	bTo := verify.Mono()

	evs := p.events()
	r.op(len(evs))
	var (
		grantAt, deadline, lossAt int64
		maxModel                  int64
		uses                      []reused
		tm                        timer
		lateRenewals              int
		ws                        []pyev
		ended                     bool
	)
	for _, e := range evs {
		switch e.E {
		case "grant":
			grantAt, deadline, maxModel = e.T, e.D, e.D
		case "dl":
			if e.Tok == token {
				deadline, maxModel = e.D, max(maxModel, e.D)
				if lateFrom != 0 && e.T > lateFrom && e.T < lateTo {
					lateRenewals++
				}
			}
		case "cdl":
			// The client's own deadline is never later than the model's.
			if e.D > maxModel+int64(time.Millisecond) {
				r.violation("the client's Lease.deadline is %s after the model's local deadline", ms(time.Duration(e.D-maxModel)))
			}
		case "work":
			ws = append(ws, e)
		case "lost":
			if lossAt == 0 {
				lossAt = e.T
			}
			if e.Typ != "LostError" {
				r.violation("on_lost was called with a %s (%s), want a LostError", e.Typ, e.Err)
			}
		case "timed":
			var err error
			if e.Err != "" {
				err = errors.New(e.Err)
			}
			tm.record("Python "+e.What, time.Duration(e.Timeout*float64(time.Second)), time.Duration(e.Took*float64(time.Second)), err)
			if strings.HasPrefix(e.Err, "Unreachable") && strings.HasPrefix(e.What, "acquire") && e.Rid == "" {
				r.violation("Python %s raised an Unreachable that names no request id: %s", e.What, e.Err)
			}
		case "reuse":
			uses = append(uses, *e.Use)
		case "end":
			ended = true
		}
	}
	if token == 0 || grantAt == 0 {
		t.Fatalf("the Python holder reported no grant: %s", p.errs.String())
	}
	if !ended {
		r.violation("the Python holder did not finish: %s", verify.Clip(p.errs.String(), 20))
	}
	if lossAt == 0 {
		r.violation("on_lost was never called: %s", verify.Clip(p.errs.String(), 20))
	} else if fault == faultStop {
		late := time.Duration(lossAt - max(deadline, contAt))
		if late > lossBound {
			r.violation("loss declared %s after the resume (bound %s)", ms(late), ms(lossBound))
		}
		r.note("loss", lossAt-contAt, "on_lost %s after the resume (bound %s), the local deadline had passed %s before it", ms(time.Duration(lossAt-contAt)),
			ms(lossBound), ms(time.Duration(contAt-deadline)))
	} else {
		late := time.Duration(lossAt - max(deadline, grantAt))
		if late > lossBound {
			r.violation("loss declared %s after the local deadline (bound %s)", ms(late), ms(lossBound))
		}
		r.note("loss", int64(late), "on_lost %s the local deadline (bound +%s)", signed(late, "after", "before"), ms(lossBound))
	}
	if fault == faultLate {
		r.note("late renewals", -int64(lateRenewals), "%d renewals confirmed %s late while the lease was held", lateRenewals, ms(lateHeld))
	}
	var lastWork pyev
	afterDeadline, afterLoss := 0, 0
	for _, w := range ws {
		if w.T >= deadline {
			afterDeadline++
		}
		if lossAt != 0 && w.T > lossAt {
			afterLoss++
		}
		lastWork = w
	}
	if afterDeadline > 0 {
		r.violation("%d work steps began after the local deadline (the last %s after it)", afterDeadline, ms(time.Duration(lastWork.T-deadline)))
	}
	if afterLoss > 0 {
		r.violation("%d work steps began after on_lost", afterLoss)
	}
	r.note("work", lastWork.T-deadline, "%d work steps, the last begun %s the local deadline", len(ws), signed(time.Duration(lastWork.T-deadline), "after", "before"))
	tm.check(r)

	// The fenced write with the lost token, then the next holder's grant.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	werr := or.write(wctx, or.o.URL(), name, "lost", token)
	cancel()
	u := reused{What: "fenced write", OK: errors.Is(werr, errStale)}
	if werr != nil {
		u.Err = werr.Error()
	}
	checkReuse(r, append(uses, u), direct, token, lb)
	if err := lb.Release(ctx); err != nil {
		t.Errorf("B's release: %v", err)
	}
	or.check(r)
	h := &verify.History{Events: []verify.Event{
		{E: "cs", Worker: "a", Proc: "a", Key: name, Token: token, From: grantAt, To: max(lastWork.T1, grantAt)},
		{E: "cs", Worker: "b", Proc: "b", Key: name, Token: lb.Token(), From: g.from, To: bTo},
	}}
	if res := verify.Check(h, verify.CheckOptions{NoLinearizability: true}); res.Overlaps > 0 || res.TokenRegressions > 0 {
		r.violation("critical sections: %d overlaps, %d token regressions: %s", res.Overlaps, res.TokenRegressions, res.FirstBad)
	}
	if fault == faultStop {
		r.note("stop", g.from-stopAt, "stopped %s, B granted %s into the stop", ms(time.Duration(contAt-stopAt)), ms(time.Duration(g.from-stopAt)))
	}
}
