package holders

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/mutation"
	"github.com/leasehold/leasehold/testrig/proctest"
	"github.com/leasehold/leasehold/testrig/verify"
	"github.com/leasehold/leasehold/testrig/verify/netfault"
)

// The `leasehold run` rows' faults (besides faultHang, faultLate,
// faultForce; faultStop stops the supervisor).
const (
	// faultKeeperStop: the keeper alone is stopped (SIGSTOP) for 2 × TTL,
	// then, while it is still stopped, the backend hangs.
	faultKeeperStop = "keeper-stop"
	// faultGroupKill: the command exits leaving a process that ignores
	// SIGTERM; while the keeper stops it, leasehold's own process group
	// gets SIGKILL.
	faultGroupKill = "group-kill"
)

// runFaults are the faults of the `leasehold run` rows.
var runFaults = []string{faultHang, faultLate, faultForce, faultStop, faultKeeperStop, faultGroupKill}

// runTTL is the `leasehold run` rows' lease TTL: a kill margin of 100 ms,
// a renewal window (TTL·0.99 − 5 ms − TTL/3) of 1.31 s. runLate is beyond
// that window: no renewal is confirmed in time.
const (
	runTTL  = 2 * time.Second
	runLate = 1500 * time.Millisecond
)

// killMargin is run's kill margin: max(50 ms, 5 % of TTL).
func killMargin(ttl time.Duration) time.Duration { return max(50*time.Millisecond, ttl/20) }

// buildLeasehold builds cmd/leasehold (with tags, if given) into a
// temporary directory of t.
func buildLeasehold(t *testing.T, tags string) string {
	t.Helper()
	if proctest.GoCommand() == "" {
		t.Skip("R17's run rows need the go command to build leasehold")
	}
	var flags []string
	if tags != "" {
		flags = []string{"-tags", tags}
	}
	start := time.Now()
	bin, err := proctest.BuildLeasehold(t.TempDir(), proctest.EnvWithout(mutation.Env, verify.EnvReport, verify.EnvWorker, verify.EnvCLI), flags...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built leasehold (tags %q) in %s", tags, time.Since(start).Round(time.Millisecond))
	return bin
}

// TestR17Run is R17 for `leasehold run` over the lease server (and Redis
// in the long tier), its store reached through a fault proxy. The command
// is a child and a grandchild that ignore SIGTERM and beat every 5 ms, so
// only a SIGKILL of the group stops them. Per row: the command's last
// heartbeat before the supervisor's local deadline (as the store's last
// renewal bounds it from above), run exits 76 after a loss, `run --wait`
// back within its wait + callBound, and the next holder's grant intact
// after the lost supervisor is done.
func TestR17Run(t *testing.T) {
	if testing.Short() {
		t.Skip("R17 holds leases for seconds")
	}
	proctest.MarkTrees(t)
	bin := buildLeasehold(t, "")
	runRows(t, bin, "", runFaults, verify.Size(1, 3))
}

// runRows runs the given faults' rows with the leasehold binary bin (and
// the deliberate bug mut switched on, if not "").
func runRows(t *testing.T, bin, mut string, faults []string, rounds int) []*row {
	srv := verify.StartTarget(t, "server")
	bs := []backend{{name: "server", addr: srv.Addr, url: srv.URL, urlFor: srv.URLFor}}
	if verify.Long() && mut == "" {
		for _, b := range backends(t) {
			if b.name == "redis" {
				bs = append(bs, b)
			}
		}
	}
	var rows []*row
	for _, b := range bs {
		for _, fault := range faults {
			t.Run(b.name+"/"+fault, func(t *testing.T) {
				r := newRow(t, "run("+b.name+")", fault)
				r.expectBad = mut != ""
				for i := 0; i < rounds && (r.expectBad || !t.Failed()); i++ {
					r.round()
					runRound(t, r, bin, mut, b, fault)
				}
				if mut == "" {
					r.report()
				}
				rows = append(rows, r)
			})
		}
	}
	return rows
}

// supervisor is a running `leasehold run`.
type supervisor struct {
	cmd *exec.Cmd
	// errPath is its standard error, a file (not a pipe: a process of the
	// command left running would hold a pipe open, and Wait with it).
	errPath string
	done    chan struct{}
	code    int   // exit status (-1: killed by a signal)
	exitAt  int64 // verify.Mono
}

// startRun starts `leasehold run` with args in a process group of its own;
// env adds to the environment.
func startRun(t *testing.T, bin string, env []string, args ...string) *supervisor {
	t.Helper()
	s := &supervisor{done: make(chan struct{})}
	s.cmd = exec.Command(bin, append([]string{"run"}, args...)...)
	s.cmd.Env = append(runEnv(), env...)
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s.errPath, s.cmd.Stderr = f.Name(), f
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(s.done)
		err := s.cmd.Wait()
		s.exitAt = verify.Mono()
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee):
			s.code = ee.ExitCode()
		default:
			s.code = -2
		}
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	})
	return s
}

// stderr is what the supervisor wrote to its standard error so far.
func (s *supervisor) stderr() string {
	b, _ := os.ReadFile(s.errPath)
	return string(b)
}

// runEnv is the environment of a supervisor: this process's, without
// what would confuse it or its command.
func runEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "LEASEHOLD_VERIFY_") || strings.HasPrefix(k, "LEASEHOLD_R17_") ||
			k == mutation.Env || k == "LEASEHOLD_STORE" || k == "LEASEHOLD_TOKEN" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// wait waits up to d for the supervisor to exit and reports whether it did.
func (s *supervisor) wait(d time.Duration) bool {
	select {
	case <-s.done:
		return true
	case <-time.After(d):
		return false
	}
}

// deadlineBound returns an upper bound of the local deadline of the
// holder of name, read now from the store directly: the store's expiry
// (it counts from its receipt of the last renewal, after the holder's t0)
// less TTL·ρ + ε. Read once no renewal sent later can be confirmed in
// time, it bounds the deadline the holder has.
func deadlineBound(ctx context.Context, s leasehold.Store, name string) (int64, leasehold.Record, error) {
	rec, err := s.Get(ctx, name)
	if err != nil {
		return 0, rec, err
	}
	at := verify.Mono()
	return at + int64(rec.Remaining) - int64(rec.TTL-life(rec.TTL)), rec, nil
}

// runRound is one round of a `leasehold run` row.
func runRound(t *testing.T, r *row, bin, mut string, b backend, fault string) {
	ctx := context.Background()
	tag := fmt.Sprintf("%x", rand.Uint32())
	name := fmt.Sprintf("r17/run/%s/%s", fault, tag)
	logPath := filepath.Join(t.TempDir(), "beats")
	proxy, err := netfault.NewProxy(b.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	direct := openStore(t, b.url)
	storeURL := b.urlFor(proxy.Addr())
	ttl := runTTL
	shape := "tree"
	if fault == faultGroupKill {
		shape = "leftover"
	}
	env := []string{envCommand + "=" + logPath + ";" + shape}
	if mut != "" {
		env = append(env, mutation.Env+"="+mut)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sup := startRun(t, bin, env, "--store", storeURL, "--ttl", ttl.String(), name, "--", exe, "-test.run=^$")

	token, child := waitBeating(t, sup, logPath)
	r.op(1)

	var tm timer
	// A second `leasehold run --wait` of the held lease through the proxy,
	// already waiting when the backend hangs or turns slow: it must give
	// up (75) within its wait.
	var waiting func()
	if fault == faultHang || fault == faultLate {
		waiting = startWaiting(t, &tm, bin, storeURL, name, ttl, 1500*time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	var (
		faultAt, dUp int64
		bound        string // what dUp is
		wantCode     = 76
		keeper       int
	)
	fromStore := func() {
		d, _, err := deadlineBound(ctx, direct, name)
		if err != nil {
			t.Fatalf("read %s from the store: %v", name, err)
		}
		dUp, bound = d, "the store's expiry − TTL·1 % − 5 ms"
	}
	switch fault {
	case faultHang:
		if err := blackhole(proxy); err != nil {
			t.Fatal(err)
		}
		faultAt = verify.Mono()
		fromStore()
	case faultLate:
		if err := late(proxy, runLate); err != nil {
			t.Fatal(err)
		}
		faultAt = verify.Mono()
		fromStore()
	case faultForce:
		dUp, bound = forceBound(t, ctx, direct, name)
		faultAt = verify.Mono()
	case faultStop:
		if err := syscall.Kill(sup.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		faultAt = verify.Mono()
		fromStore()
		time.AfterFunc(2*ttl, func() { _ = syscall.Kill(sup.cmd.Process.Pid, syscall.SIGCONT) })
	case faultKeeperStop:
		keeper = parentOf(t, child)
		if err := syscall.Kill(keeper, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		r.faults++
		time.Sleep(2 * ttl)
		// leasehold goes on renewing while its keeper is stopped: the
		// command runs on, its lease held.
		rec, err := direct.Get(ctx, name)
		bs, _ := readBeats(logPath)
		last := lastBeat(bs, token, "")
		switch {
		case err != nil || rec.Token != token:
			r.violation("the lease was lost while only the keeper was stopped (%s later): %v %+v", ms(2*ttl), err, rec)
		case verify.Mono()-last > int64(500*time.Millisecond):
			r.violation("the command stopped beating while only the keeper was stopped")
		}
		if err := blackhole(proxy); err != nil {
			t.Fatal(err)
		}
		faultAt = verify.Mono()
		fromStore()
	case faultGroupKill:
		// The child exits 300 ms after it started, leaving the
		// grandchild; 150 ms later the keeper is stopping it.
		for end := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			bs, _ := readBeats(logPath)
			if slices.ContainsFunc(bs, func(x beat) bool { return x.Kind == 'E' && x.Role == "child" }) {
				break
			}
			if time.Now().After(end) {
				t.Fatal("the command did not exit")
			}
		}
		time.Sleep(150 * time.Millisecond)
		if err := syscall.Kill(-sup.cmd.Process.Pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		faultAt = verify.Mono()
		fromStore()
		wantCode = -1
	}
	r.faults++

	// The lease is lost (or its supervisor gone): by the deadline
	// bound, no process of the command may beat.
	if time.Sleep(time.Duration(dUp-verify.Mono()) + time.Second); fault == faultKeeperStop {
		_ = syscall.Kill(keeper, syscall.SIGCONT)
	}
	// B takes the lease once the store lets it go.
	b2, err := leasehold.New(direct, leasehold.WithOwner("r17-b-"+tag))
	if err != nil {
		t.Fatal(err)
	}
	bctx, cancel := context.WithTimeout(ctx, 3*ttl+10*time.Second)
	lb, err := b2.Acquire(bctx, name, leasehold.TTL(time.Minute))
	cancel()
	if err != nil {
		t.Fatalf("B could not take %s: %v", name, err)
	}
	if lb.Token() <= token {
		r.violation("B's token %d is not above the lost one %d", lb.Token(), token)
	}
	if waiting != nil {
		waiting()
	}
	tm.check(r) // before the heal: the backend is still slow or hung
	if err := proxy.Heal(); err != nil {
		t.Fatal(err)
	}
	if fault != faultGroupKill {
		exitWait := 30 * time.Second
		if mut != "" {
			exitWait = 3 * time.Second // the bug may keep it waiting
		}
		if !sup.wait(exitWait) {
			r.violation("leasehold run had not exited %s after B took its lease: %s", ms(exitWait), sup.stderr())
		} else if sup.code != wantCode {
			r.violation("leasehold run exited %d, want %d: %s", sup.code, wantCode, sup.stderr())
		}
	}
	t.Logf("leasehold run (exit %d) said: %s", sup.code, sup.stderr())
	if fault == faultKeeperStop && !strings.Contains(sup.stderr(), "keeper of the command's process group was stopped") {
		r.violation("leasehold did not say that its keeper was stopped: %s", sup.stderr())
	}
	// The lost supervisor is done: the next holder's grant is intact.
	rec, err := direct.Get(ctx, name)
	if err != nil || rec.Token != lb.Token() {
		r.violation("B's lease after the lost supervisor was done: %+v, %v (want token %d)", rec, err, lb.Token())
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	if err := lb.Renew(rctx); err != nil {
		r.violation("B cannot renew after the lost supervisor was done: %v", err)
	}
	cancel()
	if err := lb.Release(ctx); err != nil {
		t.Errorf("B's release: %v", err)
	}
	r.op(4)

	bs, err := readBeats(logPath)
	if err != nil {
		t.Fatal(err)
	}
	r.op(len(bs))
	last := lastBeat(bs, token, "")
	after := 0
	for _, x := range bs {
		if x.Token == token && x.T >= dUp {
			after++
		}
	}
	if after > 0 {
		r.violation("%d heartbeats of the command after the local deadline (%s; the last %s after it)", after, bound, ms(time.Duration(last-dUp)))
	}
	switch fault {
	case faultForce:
		r.note("last", last-dUp, "the command's last heartbeat %s after the force-release, %s before the local deadline (%s; kill margin %s)",
			ms(time.Duration(last-faultAt)), ms(time.Duration(dUp-last)), bound, ms(killMargin(ttl)))
		if d := time.Duration(last - faultAt); d > ttl/3+ttl/3+lossBound {
			r.violation("the command beat %s after the force-release (bound: the next renewal TTL/3, then --grace TTL/3, + %s)", ms(d), ms(lossBound))
		}
	case faultGroupKill:
		leftover := lastBeat(bs, token, "grandchild")
		d := time.Duration(leftover - faultAt)
		r.note("last", int64(d), "the leftover's last heartbeat %s leasehold's group was killed (bound %s after), %s before the local deadline (%s)",
			signed(d, "after", "before"), ms(lossBound), ms(time.Duration(dUp-leftover)), bound)
		if d > lossBound {
			r.violation("the leftover beat %s after leasehold's group was killed (bound %s)", ms(d), ms(lossBound))
		}
	default:
		r.note("last", last-dUp, "the command's last heartbeat %s before the local deadline (%s; kill margin %s)", ms(time.Duration(dUp-last)), bound, ms(killMargin(ttl)))
	}
	if fault == faultStop || fault == faultKeeperStop {
		r.note("stop", 0, "stopped %s", ms(2*ttl))
	}
}

// waitBeating waits until both processes of sup's command beat in the
// log at logPath and returns their token and the child's pid.
func waitBeating(t *testing.T, sup *supervisor, logPath string) (token uint64, child int) {
	t.Helper()
	for end := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		bs, _ := readBeats(logPath)
		roles := map[string]bool{}
		for _, x := range bs {
			if x.Kind == 'B' {
				roles[x.Role], token = true, x.Token
				if x.Role == "child" {
					child = x.Pid
				}
			}
		}
		if roles["child"] && roles["grandchild"] {
			return token, child
		}
		select {
		case <-sup.done:
			t.Fatalf("leasehold run exited %d before its command ran: %s", sup.code, sup.stderr())
		default:
		}
		if time.Now().After(end) {
			t.Fatalf("the command did not start within 60 s: %s", sup.stderr())
		}
	}
}

// startWaiting starts `leasehold run --wait WAIT` of name, held by
// another, and returns once it says that it waits (its wait began before
// that). The function it returns waits for it to give up and records on
// tm how long after it said so it exited: at most WAIT + callBound.
func startWaiting(t *testing.T, tm *timer, bin, storeURL, name string, ttl, wait time.Duration) func() {
	t.Helper()
	s := startRun(t, bin, nil, "--verbose", "--store", storeURL, "--ttl", ttl.String(), "--wait", wait.String(), name, "--", "true")
	var from int64
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if strings.Contains(s.stderr(), "waiting for") {
			from = verify.Mono()
			break
		}
		select {
		case <-s.done:
			t.Fatalf("leasehold run --wait exited %d before it waited: %s", s.code, s.stderr())
		default:
		}
		if time.Now().After(end) {
			t.Fatalf("leasehold run --wait did not wait within 30 s: %s", s.stderr())
		}
	}
	what := fmt.Sprintf("leasehold run --wait %s (waiting when the fault came)", wait)
	return func() {
		var err error
		if !s.wait(time.Duration(from + int64(wait+10*time.Second) - verify.Mono())) {
			_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
			<-s.done
			err = fmt.Errorf("still waiting 10 s after its wait, killed: %s", s.stderr())
		} else if s.code != 75 {
			err = fmt.Errorf("exited %d: %s", s.code, s.stderr())
		}
		tm.record(what, wait, time.Duration(s.exitAt-from), err)
	}
}

// forceBound force-releases name and returns an upper bound of its
// holder's local deadline: from the record the lease server's
// force-release returns (its expiry then); on a store used directly,
// where the force is a Get and a release, from the moment the release
// returned (a renewal between the two may have moved the expiry on).
func forceBound(t *testing.T, ctx context.Context, s leasehold.Store, name string) (int64, string) {
	t.Helper()
	if fr, ok := s.(interface {
		ForceRelease(ctx context.Context, name string) (leasehold.Record, error)
	}); ok {
		rec, err := fr.ForceRelease(ctx, name)
		at := verify.Mono()
		if err != nil {
			t.Fatalf("force-release %s: %v", name, err)
		}
		return at + int64(rec.Remaining) - int64(rec.TTL-life(rec.TTL)), "the store's expiry at the force − TTL·1 % − 5 ms"
	}
	if err := forceRelease(ctx, s, name); err != nil {
		t.Fatalf("force-release %s: %v", name, err)
	}
	return verify.Mono() + int64(life(runTTL)), "the force-release's end + TTL·0.99 − 5 ms"
}

// lastBeat is the latest heartbeat of token's command (of role, if not "").
func lastBeat(bs []beat, token uint64, role string) int64 {
	var last int64
	for _, x := range bs {
		if x.Token == token && (role == "" || x.Role == role) && x.T > last {
			last = x.T
		}
	}
	return last
}

// parentOf returns the parent pid of pid (from /proc).
func parentOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatal(err)
	}
	return ppid
}
