package recipes_test

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/testrig/verify"
	"github.com/leasehold/leasehold/testrig/verify/recipes"
)

// cs is a leadership or permit hold from..to (seconds) with token tok.
func cs(key, owner, permit string, tok uint64, from, to float64) verify.Event {
	return verify.Event{E: "cs", Worker: strings.SplitN(owner, "-", 2)[0], Proc: owner + ".0", Key: key, Owner: owner,
		Token: tok, From: int64(from * 1e9), To: int64(to * 1e9), Msg: permit}
}

// TestCheckTerms shows the term checks catch what they are for, on
// made-up histories: two leaders with one term, a term lower than an
// earlier leadership's, and neither in a correct history.
func TestCheckTerms(t *testing.T) {
	for _, c := range []struct {
		name              string
		evs               []verify.Event
		shared, regressed int
	}{
		{"correct", []verify.Event{
			cs("e", "w0-0", "", 5, 1, 2), cs("e", "w1-0", "", 7, 2.5, 3), cs("e", "w0-1", "", 9, 3.5, 4),
			cs("other", "w1-1", "", 2, 1, 5), // another election has its own terms
		}, 0, 0},
		{"two leaders of one term", []verify.Event{
			cs("e", "w0-0", "", 5, 1, 2), cs("e", "w1-0", "", 5, 3, 4),
		}, 1, 1},
		{"term regression", []verify.Event{
			cs("e", "w0-0", "", 7, 1, 2), cs("e", "w1-0", "", 6, 3, 4),
		}, 0, 1},
		{"overlapping leaderships are verify.Check's to find, not a regression", []verify.Event{
			cs("e", "w0-0", "", 7, 1, 3), cs("e", "w1-0", "", 6, 2, 4),
		}, 0, 0},
		{"a leadership learned after its deadline held nothing", []verify.Event{
			cs("e", "w0-0", "", 7, 1, 2), cs("e", "w1-0", "", 6, 3, 3),
		}, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := recipes.CheckTerms(&verify.History{Events: c.evs})
			if r.Shared != c.shared || r.Regressions != c.regressed {
				t.Fatalf("got %s; want %d shared, %d regressions", r, c.shared, c.regressed)
			}
			if (r.Violations() > 0) != (r.First != "") {
				t.Fatalf("violations %d but first %q", r.Violations(), r.First)
			}
		})
	}
	// Two leaders at once is the overlap check's (Permits 1).
	res := verify.Check(&verify.History{Events: []verify.Event{cs("e", "w0-0", "", 7, 1, 3), cs("e", "w1-0", "", 8, 2, 4)}},
		verify.CheckOptions{Permits: 1, NoLinearizability: true})
	if res.Overlaps != 1 {
		t.Fatalf("two leaders at once: %d overlaps, want 1", res.Overlaps)
	}
}

// TestCheckPermits shows the permit checks, and the harness's overlap
// check with Permits N on semaphore events, catch a fourth holder, two
// holders of one permit and a permit outside [0, N).
func TestCheckPermits(t *testing.T) {
	p := func(i int) string { return "s/permit/" + strconv.Itoa(i) }
	three := []verify.Event{
		cs("s", "w0-0", p(0), 3, 1, 4), cs("s", "w1-0", p(1), 4, 1.5, 4), cs("s", "w2-0", p(2), 5, 2, 4),
		cs("s", "w0-1", p(0), 9, 4.5, 5), // permit 0 again, after its first holder
	}
	for _, c := range []struct {
		name                string
		evs                 []verify.Event
		outOfRange, overlap int
		max, tooMany        int
	}{
		{"three at once", three, 0, 0, 3, 0},
		{"a fourth holder on a fourth permit", append(three[:3:3], cs("s", "w3-0", p(3), 6, 3, 3.5)), 1, 0, 4, 1},
		{"two holders of one permit", append(three[:3:3], cs("s", "w3-0", p(1), 6, 3, 3.5)), 0, 1, 4, 1},
		{"not a permit of this semaphore", []verify.Event{cs("s", "w0-0", "t/permit/0", 3, 1, 2)}, 1, 0, 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := recipes.CheckPermits(&verify.History{Events: c.evs}, 3)
			if r.OutOfRange != c.outOfRange || r.Overlaps != c.overlap || r.MaxAtOnce != c.max {
				t.Fatalf("got %s; want %d out of range, %d overlaps, at most %d at once", r, c.outOfRange, c.overlap, c.max)
			}
			res := verify.Check(&verify.History{Events: c.evs}, verify.CheckOptions{Permits: 3, NoLinearizability: true})
			if res.Overlaps != c.tooMany {
				t.Fatalf("verify.Check with Permits 3: %d overlaps, want %d", res.Overlaps, c.tooMany)
			}
		})
	}
}

// TestHolderPauser stops a process of an armed group at its read, and
// only one, and continues it after the armed length. The waits for a
// state are long and the pause outlasts them (a stop is seen only once
// the process runs to take the signal: under load that took more than the
// 100 ms this test once gave it, with a 300 ms pause).
func TestHolderPauser(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skipf("no sleep command: %v", err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid := cmd.Process.Pid
	hp := recipes.NewHolderPauser()
	defer hp.Close()
	hp.Set("g", pid)
	hp.OnRead(pid, "k") // not armed: nothing
	if stopped(t, pid, 100*time.Millisecond) {
		t.Fatal("stopped without being armed")
	}
	hp.Arm("h", time.Second) // another group
	hp.OnRead(pid, "k")
	if stopped(t, pid, 100*time.Millisecond) {
		t.Fatal("stopped for another group's pause")
	}
	const pause = 5 * time.Second
	hp.Arm("g", pause)
	hp.OnRead(pid, "k")
	if !stopped(t, pid, pause-time.Second) {
		t.Fatalf("not stopped %s after an armed read (state %q)", pause-time.Second, procState(t, pid))
	}
	if hp.Armed("g") {
		t.Fatal("still armed after pausing")
	}
	hp.Wait()
	for deadline := time.Now().Add(10 * time.Second); procState(t, pid) == "T"; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("still stopped 10 s after the pause")
		}
	}
	ps := hp.Pauses("g")
	if len(ps) != 1 || ps[0].Pid != pid || ps[0].Key != "k" || ps[0].To <= ps[0].From {
		t.Fatalf("pauses %+v", ps)
	}
	if d := time.Duration(ps[0].To - ps[0].From); d < pause {
		t.Fatalf("paused %s, want the armed %s", d, pause)
	}
}

// stopped reports whether pid is seen stopped within d.
func stopped(t *testing.T, pid int, d time.Duration) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(2 * time.Millisecond) {
		if procState(t, pid) == "T" {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// procState is the state letter of pid in /proc ("T" for stopped and
// traced-stopped).
func procState(t *testing.T, pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	s := string(b)
	st := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[0]
	if st == "t" {
		return "T"
	}
	return st
}

// TestEtcdUnconfirmedGrants: an unanswered acquire that was granted on an
// unrefreshed spare etcd lease may lose its grant half an etcd TTL after
// the call; the history is illegal for the model as recorded and legal once
// the unanswered acquire asks for the shorter lease. Answered grants keep
// their TTL.
func TestEtcdUnconfirmedGrants(t *testing.T) {
	const s = int64(time.Second)
	ttl := int64(2 * time.Second)
	h := &verify.History{Events: []verify.Event{
		{E: "call", Worker: "w0", Seq: 1, Proc: "w0-0.0", Key: "k", Op: "acquire", Owner: "a", ReqID: "r1", TTL: ttl, T: 10 * s},
		{E: "call", Worker: "w1", Seq: 1, Proc: "w1-0.0", Key: "k", Op: "acquire", Owner: "b", ReqID: "r2", TTL: ttl, T: 10*s + s/5},
		{E: "ret", Worker: "w1", Seq: 1, Proc: "w1-0.0", Key: "k", Op: "acquire", Out: 1, Holder: "a", T: 10*s + s/5 + s/10},
		{E: "call", Worker: "w1", Seq: 2, Proc: "w1-0.0", Key: "k", Op: "acquire", Owner: "b", ReqID: "r3", TTL: ttl, T: 11*s + s/2},
		{E: "ret", Worker: "w1", Seq: 2, Proc: "w1-0.0", Key: "k", Op: "acquire", OK: true, Out: 2, T: 11*s + s/2 + s/10},
	}}
	if r := verify.Check(h, verify.CheckOptions{}); r.Illegal != 1 {
		t.Fatalf("as recorded: %s; want illegal", r)
	}
	adj, n := recipes.EtcdUnconfirmedGrants(h)
	if n != 1 {
		t.Fatalf("%d acquires changed, want 1", n)
	}
	if r := verify.Check(adj, verify.CheckOptions{}); !r.Passed() {
		t.Fatalf("modelled: %s; want ok", r)
	}
	if h.Events[0].TTL != ttl || adj.Events[0].TTL != ttl/2 || adj.Events[3].TTL != ttl {
		t.Fatalf("TTLs: recorded %d, modelled %d and %d", h.Events[0].TTL, adj.Events[0].TTL, adj.Events[3].TTL)
	}
}
