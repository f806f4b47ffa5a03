package recipes_test

import (
	"fmt"
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
// the unanswered acquire is modelled as one the store may end. Answered
// acquires stay as they were.
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
	if h.Events[0].Op != "acquire" || adj.Events[0].Op != "unheard" || adj.Events[1].Op != "acquire" || adj.Events[3].Op != "acquire" {
		t.Fatalf("ops: recorded %q, modelled %q, %q and %q", h.Events[0].Op, adj.Events[0].Op, adj.Events[1].Op, adj.Events[3].Op)
	}
}

// ci52 is the history of one key from CI run 52's R7 row (2026-12-05),
// as the failure printed it (times in ms on the test's monotonic clock;
// the unanswered acquire with its recorded TTL of 2 s). The first line is
// added: the grant the printed window begins inside. w1-1's acquire was
// granted (w5-0 and others saw w1-1 hold token 260) and its answer never
// came; 739 ms after its call w7-0 took the lease. The etcd store ends
// such a grant itself, at any moment after the call: it revokes the
// etcd lease of an acquire whose reply never came, or whose spare's
// refresh failed (endUnheard in etcd/ops.go).
const ci52 = `
[46236900.000ms 46236902.000ms] w4-1 acquire tok=0 ttl=2s -> token 209
[46236953.377ms 46236955.010ms] w5-0 acquire tok=0 ttl=2s -> held by w4-1/209
[46236985.548ms 46236989.401ms] w6-0 acquire tok=0 ttl=2s -> held by w4-1/209
[46237080.076ms 46237082.015ms] w6-1 acquire tok=0 ttl=2s -> held by w4-1/209
[46237087.681ms 46237090.056ms] w6-1 acquire tok=0 ttl=2s -> held by w4-1/209
[46237096.767ms 46237100.154ms] w6-1 acquire tok=0 ttl=2s -> held by w4-1/209
[46237105.383ms 46237107.610ms] w6-0 acquire tok=0 ttl=2s -> held by w4-1/209
[46237112.999ms 46237114.432ms] w4-1 release tok=209 ttl=0s -> ok
[46237115.833ms 46237117.069ms] w6-1 acquire tok=0 ttl=2s -> token 221
[46237219.758ms 46237222.184ms] w1-1 acquire tok=0 ttl=2s -> held by w6-1/221
[46237236.992ms 46237239.298ms] w5-0 acquire tok=0 ttl=2s -> held by w6-1/221
[46237317.923ms 46237319.631ms] w6-1 release tok=221 ttl=0s -> ok
[46237410.829ms 46237412.783ms] w6-0 acquire tok=0 ttl=2s -> token 243
[46237530.396ms 46237532.794ms] w5-0 acquire tok=0 ttl=2s -> held by w6-0/243
[46237613.977ms 46237615.636ms] w6-0 release tok=243 ttl=0s -> ok
[46237678.482ms 4611686018427.388ms] w1-1 acquire tok=0 ttl=2s -> unknown
[46237908.942ms 46237911.274ms] w5-0 acquire tok=0 ttl=2s -> held by w1-1/260
[46237956.190ms 46237958.579ms] w7-0 acquire tok=0 ttl=2s -> held by w1-1/260
[46237956.211ms 46237957.590ms] w3-1 acquire tok=0 ttl=2s -> held by w1-1/260
[46237960.810ms 46237962.135ms] w3-1 acquire tok=0 ttl=2s -> held by w1-1/260
[46237962.437ms 46237967.550ms] w7-0 acquire tok=0 ttl=2s -> held by w1-1/260
[46237970.414ms 46237971.647ms] w3-1 acquire tok=0 ttl=2s -> held by w1-1/260
[46237972.803ms 46237974.845ms] w7-0 acquire tok=0 ttl=2s -> held by w1-1/260
[46237989.909ms 46237991.535ms] w3-1 acquire tok=0 ttl=2s -> held by w1-1/260
[46237992.231ms 46237994.069ms] w7-0 acquire tok=0 ttl=2s -> held by w1-1/260
[46238018.804ms 46238020.497ms] w3-1 acquire tok=0 ttl=2s -> held by w1-1/260
[46238021.372ms 46238022.890ms] w7-0 acquire tok=0 ttl=2s -> held by w1-1/260
[46238083.102ms 46238084.796ms] w3-1 acquire tok=0 ttl=2s -> held by w1-1/260
[46238085.144ms 46238087.409ms] w7-0 acquire tok=0 ttl=2s -> held by w1-1/260
[46238189.566ms 46238190.827ms] w3-1 acquire tok=0 ttl=2s -> held by w1-1/260
[46238232.120ms 46238417.719ms] w7-0 acquire tok=0 ttl=2s -> token 301
`

// parsePrinted turns a history printed by a failed check back into
// events, each call with its own sequence number (request ids are made up:
// no operation in these histories retries an acquire).
func parsePrinted(t *testing.T, s string) *verify.History {
	t.Helper()
	ms := func(v string) int64 {
		f, err := strconv.ParseFloat(strings.TrimSuffix(v, "ms"), 64)
		if err != nil {
			t.Fatalf("time %q: %v", v, err)
		}
		return int64(f * 1e6)
	}
	h := &verify.History{}
	for n, line := range strings.Split(strings.TrimSpace(s), "\n") {
		var call, ret, owner, op, tok, ttl, res string
		if k, err := fmt.Sscanf(line, "[%s %s %s %s %s %s ->", &call, &ret, &owner, &op, &tok, &ttl); err != nil || k != 6 {
			t.Fatalf("line %q: %v", line, err)
		}
		res = strings.TrimSpace(line[strings.Index(line, "->")+2:])
		ret = strings.TrimSuffix(ret, "]")
		d, err := time.ParseDuration(strings.TrimPrefix(ttl, "ttl="))
		if err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		token, _ := strconv.ParseUint(strings.TrimPrefix(tok, "tok="), 10, 64)
		w := strings.SplitN(owner, "-", 2)[0]
		seq := int64(n + 1)
		h.Events = append(h.Events, verify.Event{E: "call", Worker: w, Seq: seq, Proc: owner + ".0", Key: "k", Op: op,
			Owner: owner, ReqID: fmt.Sprintf("r%d", n), Token: token, TTL: int64(d), T: ms(call)})
		r := verify.Event{E: "ret", Worker: w, Seq: seq, Proc: owner + ".0", Key: "k", Op: op, T: ms(ret)}
		switch {
		case res == "unknown":
			r.Unk = true
		case res == "ok":
			r.OK = true
		case strings.HasPrefix(res, "token "):
			r.OK = true
			r.Out, _ = strconv.ParseUint(strings.TrimPrefix(res, "token "), 10, 64)
		case strings.HasPrefix(res, "held by "):
			holder, out, _ := strings.Cut(strings.TrimPrefix(res, "held by "), "/")
			r.Holder = holder
			r.Out, _ = strconv.ParseUint(out, 10, 64)
		default:
			t.Fatalf("line %q: result %q", line, res)
		}
		h.Events = append(h.Events, r)
	}
	return h
}

// TestEtcdUnheardGrantEndsEarly: CI run 52's R7 failure. The etcd store
// ends the grant of an acquire whose answer never came at some moment
// after its call, so others may see it held and then take the lease well
// within its TTL, even within half an etcd TTL of the call (what the
// unrefreshed-spare modelling alone allowed). The history is illegal as
// recorded and legal once modelled; a grant with a definite answer is
// judged as strictly as before (the same history with w1-1's acquire
// answered is still illegal).
func TestEtcdUnheardGrantEndsEarly(t *testing.T) {
	h := parsePrinted(t, ci52)
	if r := verify.Check(h, verify.CheckOptions{}); r.Illegal != 1 {
		t.Fatalf("as recorded: %s; want illegal", r)
	}
	adj, n := recipes.EtcdUnconfirmedGrants(h)
	if n != 1 {
		t.Fatalf("%d acquires modelled, want 1", n)
	}
	if r := verify.Check(adj, verify.CheckOptions{}); !r.Passed() {
		t.Fatalf("modelled: %s; want ok", r)
	}
	answered := parsePrinted(t, strings.Replace(ci52, "4611686018427.388ms] w1-1 acquire tok=0 ttl=2s -> unknown",
		"46237690.000ms] w1-1 acquire tok=0 ttl=2s -> token 260", 1))
	if adj, n := recipes.EtcdUnconfirmedGrants(answered); n != 0 {
		t.Fatalf("answered: %d acquires modelled, want 0", n)
	} else if r := verify.Check(adj, verify.CheckOptions{}); r.Illegal != 1 {
		t.Fatalf("answered: %s; want illegal (a grant taken 0.74 s into a 2 s lease)", r)
	}
}

// ci62 is the history of key k that failed TestTargetsRestart/dynamodb in
// CI run 62 (dynalite killed and started again): w1-1's acquire got no
// answer, others then saw w1-1 hold token 30, and w1-1's retry (the same
// request id: the workers retry an acquire so) got token 30 back. The
// first line is added: the grant of token 18, before the printed part.
const ci62 = `
[66676900.000ms 66676901.000ms] w1-0 acquire tok=0 ttl=1s -> token 18
[66676918.847ms 66676930.134ms] w0-1 acquire tok=0 ttl=1s -> held by w1-0/18
[66676922.683ms 66676929.235ms] w1-0 release tok=18 ttl=0s -> ok
[66676929.248ms 66676930.221ms] w1-0 acquire tok=0 ttl=1s -> token 19
[66676930.496ms 66676931.337ms] w1-0 release tok=19 ttl=0s -> ok
[66676931.350ms 66676934.171ms] w1-0 acquire tok=0 ttl=1s -> token 20
[66676934.416ms 66676935.477ms] w1-0 release tok=20 ttl=0s -> ok
[66676935.280ms 66676938.109ms] w0-1 acquire tok=0 ttl=1s -> token 21
[66676938.340ms 66676939.247ms] w0-1 release tok=21 ttl=0s -> ok
[66676939.302ms 66676940.394ms] w1-1 acquire tok=0 ttl=1s -> token 22
[66676940.699ms 66676952.537ms] w1-1 release tok=22 ttl=0s -> ok
[66676943.065ms 66676956.022ms] w0-1 acquire tok=0 ttl=1s -> token 23
[66676952.552ms 66676957.989ms] w1-1 acquire tok=0 ttl=1s -> held by w0-1/23
[66676956.968ms 66676958.769ms] w0-1 release tok=23 ttl=0s -> ok
[66676963.130ms 66676963.997ms] w1-1 acquire tok=0 ttl=1s -> token 24
[66676964.369ms 66676967.488ms] w1-1 release tok=24 ttl=0s -> ok
[66676967.501ms 66676968.432ms] w1-1 acquire tok=0 ttl=1s -> token 25
[66676968.712ms 66676969.580ms] w1-1 release tok=25 ttl=0s -> ok
[66676969.593ms 66676971.032ms] w1-1 acquire tok=0 ttl=1s -> token 26
[66676971.236ms 66676973.366ms] w1-1 release tok=26 ttl=0s -> ok
[66676973.423ms 66676975.655ms] w1-1 acquire tok=0 ttl=1s -> token 27
[66676975.900ms 66676978.568ms] w1-1 release tok=27 ttl=0s -> ok
[66676978.581ms 66676985.157ms] w1-1 acquire tok=0 ttl=1s -> token 28
[66676985.425ms 66676986.352ms] w1-1 release tok=28 ttl=0s -> ok
[66676986.389ms 66676990.578ms] w1-1 acquire tok=0 ttl=1s -> token 29
[66676990.885ms 66676991.801ms] w1-1 release tok=29 ttl=0s -> ok
[66676991.816ms 4611686018427.388ms] w1-1 acquire tok=0 ttl=1s -> unknown
[66676996.652ms 4611686018427.388ms] w0-0 acquire tok=0 ttl=1s -> unknown
[66677372.851ms 66677396.240ms] w0-0 acquire tok=0 ttl=1s -> held by w1-1/30
[66677400.788ms 66677410.006ms] w0-0 acquire tok=0 ttl=1s -> held by w1-1/30
[66677411.922ms 66677429.566ms] w1-1 acquire tok=0 ttl=1s -> token 30
`

// TestRetryGetsIndeterminateGrant: the checker judged run 62's history
// illegal: a retry with the same request id may get back the grant of an
// acquire that had no answer, whose token it learns only then. With
// another request id it is still illegal.
func TestRetryGetsIndeterminateGrant(t *testing.T) {
	h := parsePrinted(t, ci62)
	var unknown, last int
	for i, e := range h.Events {
		if e.E == "ret" && e.Unk && e.Worker == "w1" {
			unknown = i - 1
		}
		if e.E == "call" {
			last = i
		}
	}
	if h.Events[last].Owner != "w1-1" || h.Events[unknown].Owner != "w1-1" {
		t.Fatalf("history not as recorded: %+v, %+v", h.Events[unknown], h.Events[last])
	}
	if r := verify.Check(h, verify.CheckOptions{}); r.Illegal != 1 {
		t.Fatalf("with another request id: %s; want illegal", r)
	}
	h.Events[last].ReqID = h.Events[unknown].ReqID
	if r := verify.Check(h, verify.CheckOptions{}); !r.Passed() {
		t.Fatalf("the retry with the same request id: %s; want ok", r)
	}
}
