// Package interop is R15 of the verification plan: clients in other
// languages in the same histories as Go and the CLI. Go worker processes
// (the harness's lock workload), `leasehold run` processes whose commands
// write under $LEASEHOLD_TOKEN, and Python processes (clients/python) contend
// on one lease of the lease server and one of DynamoDB (dynalite), each
// doing fenced read-modify-writes at the harness's oracle; on DynamoDB,
// executions of the Step Functions machine that package sfn generates, run
// by the test executor (testrig/aslexec, as R14 runs them), contend too,
// their Lambda bodies doing the same fenced writes. The checks: no
// two critical sections overlap, the fencing tokens of all of them
// increase in the order the sections happened, whatever the language, the
// oracle finds no lost update or stale write, and the porcupine lease model
// accepts the Go and Python operations on a second lease they share.
package interop

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/dynamodb"
	"github.com/leasehold/leasehold/testrig/aslexec"
	"github.com/leasehold/leasehold/testrig/enginetest"
	"github.com/leasehold/leasehold/testrig/proctest"
	"github.com/leasehold/leasehold/testrig/verify"
	"github.com/leasehold/leasehold/testrig/verify/stepfn"
)

func TestMain(m *testing.M) {
	verify.MaybeWorker()
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// python is Debian's own interpreter, chosen deliberately (not the first
// python3 on PATH): Debian's python3-boto3, which the DynamoDB part needs,
// is installed for it.
const python = "/usr/bin/python3"

// plan is one store's run.
type plan struct {
	goWorkers, goClients, goCycles int
	pyWorkers, pyCycles            int
	runLoops, runCycles            int
	// sfnSlots executions of the generated Lambda machine at once,
	// sfnEach one after the other in every slot (DynamoDB only).
	sfnSlots, sfnEach int
	// gap: the Python and CLI clients' longest pause between cycles when
	// the machines take part.
	gap  time.Duration
	ttl  time.Duration
	hold time.Duration
}

func defaultPlan() plan {
	return verify.Size(
		plan{goWorkers: 2, goClients: 2, goCycles: 6, pyWorkers: 2, pyCycles: 10, runLoops: 2, runCycles: 4, sfnSlots: 6, sfnEach: 2, gap: time.Second, ttl: 4 * time.Second, hold: 5 * time.Millisecond},
		plan{goWorkers: 3, goClients: 2, goCycles: 30, pyWorkers: 3, pyCycles: 40, runLoops: 3, runCycles: 15, sfnSlots: 6, sfnEach: 8, gap: time.Second, ttl: 4 * time.Second, hold: 5 * time.Millisecond},
	)
}

func TestInterop(t *testing.T) {
	root := pythonRoot(t)
	bin := build(t)
	t.Run("server", func(t *testing.T) {
		run(t, "server", startServer(t, bin), bin, root, nil)
	})
	t.Run("dynamodb", func(t *testing.T) {
		base := enginetest.DynamoDBURL(t)
		if out, err := exec.Command(python, "-c", "import boto3").CombinedOutput(); err != nil {
			enginetest.Missing(t, "boto3 for "+python+" (apt-get install python3-boto3)", strings.TrimSpace(string(out)))
		}
		u, err := url.Parse(base)
		if err != nil {
			t.Fatal(err)
		}
		u.Host = "leasehold_r15"
		run(t, "dynamodb", u.String(), bin, root, sfnEnv(t, u.String()))
	})
}

// The generated machines' lease time and their Lambda function's own
// timeout (R14's: the generator needs the TTL to fit the function, its
// 10 s start allowance and a margin).
const (
	sfnTTL           = 16 * time.Second
	sfnLambdaTimeout = 2 * time.Second
)

// sfnEnv creates the table and starts the Step Functions test executor
// (one, with no clock skew) and R14's Lambda function on storeURL; its
// oracle is the run's.
func sfnEnv(t *testing.T, storeURL string) *stepfn.Env {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := dynamodb.Init(ctx, storeURL); err != nil {
		t.Fatalf("create the table: %v", err)
	}
	return stepfn.NewEnv(t, storeURL, []time.Duration{0}, sfnLambdaTimeout)
}

// run is one store's contention: key "cs" by Go, Python, `leasehold run`
// and, when sfn is not nil, executions of the generated Lambda machine;
// key "lin" by Go and Python only (every operation on it is recorded, so
// porcupine can check it).
func run(t *testing.T, store, storeURL, bin, root string, sfn *stepfn.Env) {
	p := defaultPlan()
	var oracle *verify.Oracle
	if sfn != nil {
		oracle = sfn.Oracle // the Lambda bodies write there; closed when the test ends
	} else {
		o := verify.MustOracle(t, true, nil)
		defer o.Close()
		oracle = o
	}
	suffix := fmt.Sprintf("%d", time.Now().UnixNano())
	csKey, linKey := "r15/cs/"+suffix, "r15/lin/"+suffix
	// With the machines, which poll for the lock once a second at most,
	// the Python and CLI clients pause up to gap between their cycles:
	// otherwise they and the Go workers, polling every few milliseconds,
	// keep the lock busy until they are done, and the machines run last.
	var gap time.Duration
	if sfn != nil {
		gap = p.gap
	}
	start := time.Now()

	goGroup := verify.StartWorkers(t, p.goWorkers, verify.WorkerConfig{
		Store: storeURL, Keys: []string{csKey, linKey}, Clients: p.goClients, Cycles: p.goCycles,
		TTL: p.ttl, Oracle: oracle.URL(), Hold: p.hold, AcquireTimeout: 120 * time.Second,
	})
	var mu sync.Mutex
	var evs []verify.Event
	var logs []string
	var wg sync.WaitGroup
	collect := func(id string, cmd *exec.Cmd) error {
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			return err
		}
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		for sc.Scan() {
			var ev verify.Event
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				mu.Lock()
				logs = append(logs, id+": bad event: "+sc.Text())
				mu.Unlock()
				continue
			}
			mu.Lock()
			evs = append(evs, ev)
			if ev.E == "log" {
				logs = append(logs, id+": "+ev.Msg)
			}
			mu.Unlock()
		}
		err = cmd.Wait()
		if s := strings.TrimSpace(stderr.String()); s != "" {
			mu.Lock()
			logs = append(logs, id+" stderr: "+verify.Clip(s, 20))
			mu.Unlock()
		}
		return err
	}
	env := childEnv(root)
	var errMu sync.Mutex
	var errs []string
	fail := func(format string, args ...any) {
		errMu.Lock()
		errs = append(errs, fmt.Sprintf(format, args...))
		errMu.Unlock()
	}
	worker := filepath.Join(root, "testrig/verify/interop/testdata/pyworker.py")
	for i := 0; i < p.pyWorkers; i++ {
		id := fmt.Sprintf("py%d", i)
		for _, key := range []string{csKey, linKey} {
			cfg, _ := json.Marshal(map[string]any{
				"id": id + "-" + strings.Split(key, "/")[1], "store": storeURL, "key": key, "cycles": p.pyCycles / 2,
				"ttl": p.ttl.Seconds(), "hold": p.hold.Seconds(), "oracle": oracle.URL(), "acquire_timeout": 120, "gap": gap.Seconds(),
			})
			wg.Add(1)
			go func(id string, cfg []byte) {
				defer wg.Done()
				cmd := exec.Command(python, worker, "lock", string(cfg))
				cmd.Env = env
				if err := collect(id, cmd); err != nil {
					fail("%s: %v", id, err)
				}
			}(id, cfg)
		}
	}
	var sfnRes stepfn.ExecutionsResult
	if sfn != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			sfnRes, err = sfn.RunExecutions(stepfn.Executions{Lock: csKey, Prefix: "r15-" + suffix, TTL: sfnTTL,
				MaxDelay: time.Second, Slots: p.sfnSlots, Each: p.sfnEach, Hold: [2]time.Duration{p.hold, p.hold},
				Timeout: 5 * time.Minute, Seed: uint64(time.Now().UnixNano())})
			if err != nil {
				fail("step functions: %v", err)
			}
		}()
	}
	runs := 0
	for i := 0; i < p.runLoops; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for n := 0; n < p.runCycles; n++ {
				id := fmt.Sprintf("run%d-%d", i, n)
				cfg, _ := json.Marshal(map[string]any{"id": id, "key": csKey, "hold": p.hold.Seconds(), "oracle": oracle.URL()})
				cmd := exec.Command(bin, "run", "--store", storeURL, "--ttl", p.ttl.String(), "--wait", "120s",
					"--owner", "cli-"+id, csKey, "--", python, worker, "child", string(cfg))
				cmd.Env = env
				if err := collect(id, cmd); err != nil {
					fail("%s: leasehold run: %v", id, err)
					return
				}
				mu.Lock()
				runs++
				mu.Unlock()
				time.Sleep(rand.N(gap + 1))
			}
		}(i)
	}
	wg.Wait()
	goGroup.Wait(5 * time.Minute)
	elapsed := time.Since(start)

	all := append(goGroup.History().Events, evs...)
	all = append(all, sfnRes.Events...)
	for _, l := range sfnRes.Logs {
		logs = append(logs, "sfn: "+l)
	}
	allLogs := strings.Join(append(logs, goGroup.Logs()), "\n")
	for _, e := range errs {
		t.Error(e)
	}

	var cs, lin verify.History
	for _, ev := range all {
		switch ev.Key {
		case csKey:
			cs.Events = append(cs.Events, ev)
		case linKey:
			lin.Events = append(lin.Events, ev)
		}
	}
	// Every critical section of "cs", by language.
	byLang := map[string]int{}
	wrote := 0
	for _, ev := range cs.Events {
		if ev.E != "cs" {
			continue
		}
		byLang[lang(ev.Worker)]++
		if ev.Wrote {
			wrote++
		}
	}
	resCS := verify.Check(&cs, verify.CheckOptions{NoLinearizability: true})
	resLin := verify.Check(&lin, verify.CheckOptions{})
	order, firstOrder := tokenOrder(cs.Events)
	ores := oracle.Check()
	t.Logf("%s: cs key: %s; by language %v; %d wrote; token order violations %d", store, resCS, byLang, wrote, order)
	t.Logf("%s: lin key: %s", store, resLin)
	t.Logf("%s: oracle: %+v; took %s", store, ores, elapsed.Round(time.Millisecond))
	if sfn != nil {
		t.Logf("%s: step functions executions: %v", store, sfnRes.Counts)
	}

	violations := resCS.Overlaps + resCS.TokenRegressions + order + resLin.Violations() + ores.Violations()
	checker := "ok"
	switch {
	case !resLin.Passed():
		checker = resLin.Checker()
	case violations > 0:
		checker = "violations"
	}
	ops := resLin.Ops + resCS.Ops + runs
	sfnNote := "Step Functions -"
	langs := []string{"go", "cli", "python"}
	if sfn != nil {
		sfnNote = fmt.Sprintf("Step Functions %d (%d of %d executions succeeded, %d handoffs to or from other languages)", byLang["sfn"],
			sfnRes.Counts[string(aslexec.Succeeded)], p.sfnSlots*p.sfnEach, handoffs(cs.Events, "sfn"))
		langs = append(langs, "sfn")
	}
	verify.Report(t, verify.Row{
		Suite: "R15", Store: store, Ops: ops, Faults: 0, Violations: violations, Checker: checker,
		Note: fmt.Sprintf("Go %d, CLI %d, Python %d, %s critical sections on one lease, %d fenced writes; Go+Python porcupine %d/%d keys ok; %s",
			byLang["go"], byLang["cli"], byLang["python"], sfnNote, wrote, resLin.Ok, resLin.Keys, elapsed.Round(time.Second)),
	})

	// Every language must have taken part, or the test proves nothing.
	for _, l := range langs {
		if byLang[l] == 0 {
			t.Errorf("no critical section of %s on %s", l, csKey)
		}
	}
	// An execution may give up waiting for a busy lock; any other end is a
	// failure of the machine or of the executor.
	for k, n := range sfnRes.Counts {
		status, _, _ := strings.Cut(k, " ")
		switch aslexec.Status(status) {
		case aslexec.Failed, aslexec.TimedOut, aslexec.Aborted:
			if k != "FAILED Leasehold.LockNotAcquired" {
				t.Errorf("%d Step Functions executions ended %s", n, k)
			}
		}
	}
	if want := p.runLoops * p.runCycles; runs != want {
		t.Errorf("%d of %d leasehold run processes succeeded", runs, want)
	}
	if ores.Accepted == 0 {
		t.Errorf("the oracle accepted no write")
	}
	if violations > 0 || !resLin.Passed() {
		t.Errorf("R15 %s: %d violations (overlaps %d, token regressions %d, out-of-order tokens %d, oracle %d), porcupine %s\nfirst: %s %s %s %s\nlogs:\n%s",
			store, violations, resCS.Overlaps, resCS.TokenRegressions, order, ores.Violations(), resLin.Checker(),
			resCS.FirstBad, resLin.FirstBad, firstOrder, ores.First, verify.Clip(allLogs, 40))
	}
}

// TestInteropControl is the negative control: two Python processes that
// each take a lease of their own but work on one resource (a client that
// ignores the shared lock) must be found overlapping by the same checks.
func TestInteropControl(t *testing.T) {
	root := pythonRoot(t)
	srv := startServer(t, build(t))
	oracle := verify.MustOracle(t, false, nil)
	defer oracle.Close()
	key, dir := fmt.Sprintf("r15/control/%d", time.Now().UnixNano()), t.TempDir()
	var mu sync.Mutex
	var h verify.History
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		id := fmt.Sprintf("py%d", i)
		cfg, _ := json.Marshal(map[string]any{
			"id": id, "store": srv, "key": key, "lock_key": key + "/own/" + id, "cycles": 1, "ttl": 10.0,
			"hold": 0.05, "oracle": oracle.URL(), "acquire_timeout": 60, "barrier": dir, "parties": 2,
		})
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(python, filepath.Join(root, "testrig/verify/interop/testdata/pyworker.py"), "lock", string(cfg))
			cmd.Env = childEnv(root)
			out, err := cmd.Output()
			if err != nil {
				t.Errorf("%s: %v", id, err)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				var ev verify.Event
				if json.Unmarshal([]byte(line), &ev) == nil {
					h.Events = append(h.Events, ev)
				}
			}
		}()
	}
	wg.Wait()
	checkControl(t, &h, "server", "two Python clients, each on a lease of its own, on one resource", "")
}

// checkControl checks the history of a negative control on store: its two
// critical sections must be found overlapping. It reports an R15-control
// row with this note; detail is added to the log line.
func checkControl(t *testing.T, h *verify.History, store, note, detail string) {
	t.Helper()
	r := verify.Check(h, verify.CheckOptions{NoLinearizability: true})
	t.Logf("control: %s%s", r, detail)
	caught := 0
	if r.Overlaps > 0 {
		caught = 1
	}
	verify.Report(t, verify.Row{Suite: "R15-control", Store: store, Ops: r.Ops, Violations: r.Overlaps,
		Checker: fmt.Sprintf("caught %d/1", caught), Note: note})
	if r.CS != 2 || r.Overlaps == 0 {
		t.Fatalf("the control's two critical sections (%d recorded) were not found overlapping: %s", r.CS, r)
	}
}

// TestInteropControlSFN is the negative control of the Step Functions
// part: R14's Lambda body invoked by a machine that skips the lock (its
// Task alone, with a token it never got) while a Python client holds the
// DynamoDB lock must be found overlapping the Python section.
func TestInteropControlSFN(t *testing.T) {
	root := pythonRoot(t)
	if out, err := exec.Command(python, "-c", "import boto3").CombinedOutput(); err != nil {
		enginetest.Missing(t, "boto3 for "+python+" (apt-get install python3-boto3)", strings.TrimSpace(string(out)))
	}
	u, err := url.Parse(enginetest.DynamoDBURL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Host = "leasehold_r15"
	env := sfnEnv(t, u.String())
	key, dir := fmt.Sprintf("r15/control-sfn/%d", time.Now().UnixNano()), t.TempDir()
	// The Python client holds the lock for 5 s after the barrier: the
	// execution below starts when the client holds it and is at the
	// barrier, and its body must begin well within those 5 s.
	cfg, _ := json.Marshal(map[string]any{
		"id": "py0", "store": u.String(), "key": key, "cycles": 1, "ttl": 30.0, "hold": 5.0,
		"oracle": env.Oracle.URL(), "acquire_timeout": 60, "barrier": dir, "parties": 2,
	})
	cmd := exec.Command(python, filepath.Join(root, "testrig/verify/interop/testdata/pyworker.py"), "lock", string(cfg))
	cmd.Env = childEnv(root)
	var out, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		if ents, _ := os.ReadDir(dir); len(ents) > 0 {
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("the Python client never held the lock: %s", verify.Clip(stderr.String(), 20))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := os.WriteFile(filepath.Join(dir, "sfn"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := env.RunExecutions(stepfn.Executions{Lock: key, Prefix: "r15-control", TTL: sfnTTL, MaxDelay: time.Second,
		Slots: 1, Each: 1, Hold: [2]time.Duration{time.Second, time.Second}, Timeout: time.Minute, NoLock: true, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("python: %v: %s", err, verify.Clip(stderr.String(), 20))
	}
	h := verify.History{Events: res.Events}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var ev verify.Event
		if json.Unmarshal([]byte(line), &ev) == nil {
			h.Events = append(h.Events, ev)
		}
	}
	checkControl(t, &h, "dynamodb", "the Step Functions Lambda body run without the lock beside a Python holder",
		fmt.Sprintf("; executions %v", res.Counts))
}

// lang names a worker id's language.
func lang(worker string) string {
	switch {
	case strings.HasPrefix(worker, "py"):
		return "python"
	case strings.HasPrefix(worker, "run"):
		return "cli"
	case worker == "sfn":
		return "sfn"
	}
	return "go"
}

// handoffs counts the pairs of consecutive critical sections (ordered by
// start) of which one is of language l and the other is not: how often
// the lease passed between l and the other languages.
func handoffs(evs []verify.Event, l string) int {
	var cs []verify.Event
	for _, ev := range evs {
		if ev.E == "cs" {
			cs = append(cs, ev)
		}
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].From < cs[j].From })
	n := 0
	for i := 1; i < len(cs); i++ {
		if (lang(cs[i].Worker) == l) != (lang(cs[i-1].Worker) == l) {
			n++
		}
	}
	return n
}

// tokenOrder counts critical sections whose token is not above the token
// of the section before them (sections ordered by start): with no overlaps,
// every grant follows the one before it and must carry a greater token.
func tokenOrder(evs []verify.Event) (int, string) {
	var cs []verify.Event
	for _, ev := range evs {
		if ev.E == "cs" {
			cs = append(cs, ev)
		}
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].From < cs[j].From })
	n, first := 0, ""
	for i := 1; i < len(cs); i++ {
		if cs[i].Token <= cs[i-1].Token {
			n++
			if first == "" {
				first = fmt.Sprintf("%s (%s) held token %d after %s (%s) held token %d", cs[i].Worker, lang(cs[i].Worker), cs[i].Token,
					cs[i-1].Worker, lang(cs[i-1].Worker), cs[i-1].Token)
			}
		}
	}
	return n, first
}

// childEnv is the environment of Python and `leasehold run` processes: the
// client package on PYTHONPATH, nothing of the harness's or a user's
// leasehold settings.
func childEnv(root string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "LEASEHOLD_VERIFY_") || k == "LEASEHOLD_STORE" || k == "LEASEHOLD_TOKEN" ||
			k == "LEASEHOLD_AUTH_TOKEN" || k == "PYTHONPATH" || k == "LEASEHOLD_MUTATION" {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "PYTHONPATH="+filepath.Join(root, "clients/python"), "PYTHONDONTWRITEBYTECODE=1")
	if os.Getenv("AWS_ACCESS_KEY_ID") == "" {
		env = append(env, "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test")
	}
	return env
}

var (
	buildOnce sync.Once
	binDir    string
	binPath   string
	buildErr  error
)

// pythonRoot returns the repository's root (whose clients/python the
// Python workers import), or, without Debian's python3, fails or skips the
// test (see enginetest.Missing).
func pythonRoot(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(python); err != nil {
		enginetest.Missing(t, "python3 (Debian's "+python+")", err.Error())
	}
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// build builds the leasehold command of this checkout, once per test binary.
func build(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "leasehold-r15-"); buildErr != nil {
			return
		}
		binPath, buildErr = proctest.BuildLeasehold(binDir, nil)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// startServer starts `leasehold serve` on a free loopback port with a
// temporary data directory and returns its URL.
func startServer(t *testing.T, bin string) string {
	t.Helper()
	port := enginetest.FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	log, err := os.Create(filepath.Join(t.TempDir(), "serve.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--addr", addr, "--resp-addr", "", "--data-dir", t.TempDir(), "--no-sync", "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		log.Close()
	})
	u := "http://" + addr
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(u + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return u
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	b, _ := os.ReadFile(log.Name())
	t.Fatalf("leasehold serve did not become ready:\n%s", b)
	return ""
}
