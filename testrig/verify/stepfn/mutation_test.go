package stepfn

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/sfn"
	"github.com/leasehold/leasehold/testrig/verify"
)

// envTrials makes TestR14Trials run: a trialsSpec (JSON).
const envTrials = "LEASEHOLD_R14_TRIALS"

type trialsSpec struct {
	StoreURL string
	Prefix   string // lock names: Prefix + "-" + i
	Trials   int
	Seed     uint64
}

const trialLine = "R14-TRIAL "

type trialResult struct {
	Lock       string
	Violations int
	Overlaps   int
	TokenOrder int
	CS         int
	Redrives   int
	Note       string
	First      string
	Err        string // the trial could not run
}

// trialConfig is a short trial aimed at redrives: executions are often
// aborted while their task runs (the task going on for a second or two)
// and always redriven at once.
func trialConfig(lock string, seed uint64, dir string) Config {
	return Config{Lock: lock, TTL: ttl, MaxDelay: 2 * time.Second, TaskGrace: 1500 * time.Millisecond,
		Slots: 4, GoClients: 1, GoTTL: 3 * time.Second, Gap: [2]time.Duration{500 * time.Millisecond, 2 * time.Second},
		Duration: 25 * time.Second, Drain: 40 * time.Second,
		Hold: [2]time.Duration{150 * time.Millisecond, 400 * time.Millisecond},
		Faults: Faults{Abort: 0.5, AbortAfter: [2]time.Duration{50 * time.Millisecond, 200 * time.Millisecond},
			AbortHold:      [2]time.Duration{1200 * time.Millisecond, 1800 * time.Millisecond},
			RedriveAborted: 1, RedriveDelay: [2]time.Duration{0, 300 * time.Millisecond}},
		Seed: seed, Dir: dir}
}

// TestR14Trials runs trials at once in this process and prints each
// outcome as a line for testMutation. It runs only as testMutation's
// child.
func TestR14Trials(t *testing.T) {
	raw := os.Getenv(envTrials)
	if raw == "" {
		t.Skip("run by TestR14/mutation")
	}
	var spec trialsSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		t.Fatal(err)
	}
	env := NewEnv(t, spec.StoreURL, skews, lambdaTimeout)
	var wg sync.WaitGroup
	var mu sync.Mutex
	dirs := make([]string, spec.Trials)
	for i := range dirs {
		dirs[i] = t.TempDir()
	}
	for i := range spec.Trials {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lock := fmt.Sprintf("%s-%d", spec.Prefix, i)
			o, err := env.Run(t, trialConfig(lock, spec.Seed+uint64(i), dirs[i]))
			r := trialResult{Lock: lock, Violations: o.Violations(), Overlaps: o.Result.Overlaps, TokenOrder: o.TokenOrder,
				CS: o.Result.CS, Note: o.Note(), First: o.First}
			if err != nil {
				r = trialResult{Lock: lock, Err: err.Error()}
			}
			for k, v := range o.Counts {
				if strings.HasPrefix(k, "redriven from") {
					r.Redrives += v
				}
			}
			b, _ := json.Marshal(r)
			mu.Lock()
			fmt.Println(trialLine + string(b))
			mu.Unlock()
		}()
	}
	wg.Wait()
}

// testMutation shows that R14 catches the old redrive path: it builds
// this package's tests with the tag leasehold_mutations and runs them
// twice at once on tg — ten trials with the bug sfn-old-redrive switched
// on (each must find a violation: at least 9 of 10), and three with no
// bug switched on (the control: none may).
func testMutation(t *testing.T, tg verify.Target) {
	bin := verify.BuildMutated(t, ".", "R14's mutation")
	seed := verify.Seed(t)
	type child struct {
		bug, prefix string
		trials      int
		results     []trialResult
		err         error
		out         string
	}
	children := []*child{{bug: sfn.MutationOldRedrive, prefix: "mut", trials: 10}, {prefix: "ctl", trials: 3}}
	var wg sync.WaitGroup
	for _, c := range children {
		wg.Add(1)
		go func() {
			defer wg.Done()
			spec, _ := json.Marshal(trialsSpec{StoreURL: tg.URL, Prefix: c.prefix, Trials: c.trials, Seed: seed})
			cmd := exec.Command(bin, "-test.run=^TestR14Trials$", "-test.v", "-test.count=1", "-test.timeout=10m")
			cmd.Env = append(verify.MutationEnv(c.bug, envTrials), envTrials+"="+string(spec))
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			c.err = cmd.Run()
			c.out = out.String()
			sc := bufio.NewScanner(strings.NewReader(c.out))
			sc.Buffer(make([]byte, 1<<16), 1<<20)
			for sc.Scan() {
				if line, ok := strings.CutPrefix(sc.Text(), trialLine); ok {
					var r trialResult
					if err := json.Unmarshal([]byte(line), &r); err == nil {
						c.results = append(c.results, r)
					}
				}
			}
		}()
	}
	wg.Wait()
	for _, c := range children {
		if c.err != nil || len(c.results) != c.trials {
			t.Fatalf("trials %q: %v, %d of %d results:\n%s", c.bug, c.err, len(c.results), c.trials, verify.Clip(c.out, 60))
		}
		for _, r := range c.results {
			if r.Err != "" {
				t.Fatalf("trial %s could not run: %s", r.Lock, r.Err)
			}
		}
	}
	mut, ctl := children[0], children[1]
	caught, cs, redrives := 0, 0, 0
	var missed []string
	for _, r := range mut.results {
		cs += r.CS
		redrives += r.Redrives
		if r.Violations > 0 {
			caught++
			t.Logf("%s caught: %s", r.Lock, r.First)
		} else {
			missed = append(missed, r.Lock+": "+r.Note)
		}
	}
	verify.Report(t, verify.Row{Suite: "R14-mutation", Store: sfn.MutationOldRedrive + " (dynalite)", Ops: cs, Faults: redrives,
		Violations: caught, Checker: fmt.Sprintf("caught %d/%d", caught, mut.trials),
		Note: "trials with ≥ 1 overlap or token out of order; 10 trials of 25 s at once, aborts in the task redriven at once"})
	if caught < 9 {
		t.Errorf("%s caught in %d of %d trials; missed:\n%s", sfn.MutationOldRedrive, caught, mut.trials, strings.Join(missed, "\n"))
	}
	viol, cs, redrives := 0, 0, 0
	for _, r := range ctl.results {
		viol += r.Violations
		cs += r.CS
		redrives += r.Redrives
		if r.Violations > 0 {
			t.Errorf("control %s (no bug): %s\nfirst: %s", r.Lock, r.Note, r.First)
		}
	}
	checker := "ok"
	if viol > 0 {
		checker = "violations"
	}
	verify.Report(t, verify.Row{Suite: "R14-mutation", Store: "none (dynalite)", Ops: cs, Faults: redrives, Violations: viol,
		Checker: checker, Note: fmt.Sprintf("the mutated build with no bug switched on: the control, %d trials", ctl.trials)})
}
