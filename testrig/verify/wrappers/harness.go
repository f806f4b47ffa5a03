package wrappers

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/testrig/proctest"
	"github.com/leasehold/leasehold/testrig/verify"
)

// Fault kinds, applied to a supervisor's PID only (never its process
// group), or to the store.
const (
	FaultKill   = "kill"   // SIGKILL a supervisor
	FaultStop   = "stop"   // SIGSTOP a supervisor for 1.5–3 × TTL, then SIGCONT
	FaultTerm   = "term"   // SIGTERM a supervisor (a request to stop)
	FaultEngine = "engine" // SIGKILL the engine or server, restart after 0.5–1 s
	FaultForce  = "force"  // force-release a held lease through the server
	// FaultFreeze SIGSTOPs a supervisor and its command's process group
	// (keeper included) for 1.5–3 × TTL, then SIGCONTs both: a frozen
	// host or container. Leasehold cannot see it (none of its processes
	// runs); Check explains the overlaps it causes if the tree is gone
	// within Config.FreezeBound of the thaw.
	FaultFreeze = "freeze"
)

// Build builds the leasehold command (./cmd/leasehold of this module) into
// dir with the given build tags ("" for none) and returns its path.
func Build(t testing.TB, dir, tags string) string {
	t.Helper()
	if proctest.GoCommand() == "" {
		t.Skip("R13 needs the go command (not in GOROOT/bin nor on PATH) to build leasehold")
	}
	var flags []string
	if tags != "" {
		flags = []string{"-tags", tags}
	}
	start := time.Now()
	bin, err := proctest.BuildLeasehold(dir, cleanEnv(), flags...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built leasehold (tags %q) in %s", tags, time.Since(start).Round(time.Millisecond))
	return bin
}

// cleanEnv is this process's environment without what would confuse a
// supervisor, its command or the go command.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "LEASEHOLD_VERIFY_") || strings.HasPrefix(k, "LEASEHOLD_R13_") ||
			k == "LEASEHOLD_MUTATION" || k == "LEASEHOLD_STORE" || k == "LEASEHOLD_TOKEN" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// Config is one run of the suite.
type Config struct {
	Target verify.Target
	Bin    string        // the leasehold command (Build)
	TTL    time.Duration // the leases' TTL
	// Run, Elect and Sem are the numbers of supervisors of each mode:
	// "leasehold run" on one name, "leasehold elect --on-lost restart" on
	// another, "leasehold run --permits Permits" on a third.
	Run, Elect, Sem, Permits int
	Faults                   []string      // the kinds to inject, drawn uniformly
	Duration                 time.Duration // how long faults are injected
	Gap                      [2]time.Duration
	Work                     [2]time.Duration // the grandchild's running time
	Beat                     time.Duration    // heartbeat period (default 5 ms)
	Mutation                 string           // $LEASEHOLD_MUTATION for the supervisors
	Seed                     uint64
	// StopAtOverlap ends the faults as soon as the log has an overlap (the
	// mutation runs: one is all they need). Without force-releases an
	// overlap in part of the log is one in all of it.
	StopAtOverlap bool
	// FreezeBound is how long a frozen tree may live after its thaw
	// (default 1 s).
	FreezeBound time.Duration
	Dir         string // for the logs
}

// Names of the leases, per mode.
const (
	RunName   = "r13/run"
	ElectName = "r13/elect"
	SemName   = "r13/sem"
)

// Outcome is what a run did and what the checker found.
type Outcome struct {
	Result      Result
	Supervisors int            // supervisor processes started
	Faults      map[string]int // faults injected, by kind
	Exits       map[string]int // supervisors' exit statuses
	Survivors   int            // command processes still running one TTL after every supervisor had exited
	ForceTried  int            // force-releases asked (those that found the lease free are not faults)
	BadLines    int
	Took        time.Duration
}

// Total is the number of faults injected.
func (o Outcome) Total() int {
	n := 0
	for _, v := range o.Faults {
		n += v
	}
	return n
}

// Violations is the number of overlaps, late trees and survivors.
func (o Outcome) Violations() int { return o.Result.Violations() + o.Survivors }

// Note summarises the outcome for a report row.
func (o Outcome) Note(cfg Config) string {
	var kinds []string
	for _, k := range []string{FaultKill, FaultStop, FaultTerm, FaultEngine, FaultForce, FaultFreeze} {
		if n, ok := o.Faults[k]; ok || (k == FaultForce && o.ForceTried > 0) {
			if k == FaultForce {
				kinds = append(kinds, fmt.Sprintf("%s %d (of %d asked)", k, n, o.ForceTried))
				continue
			}
			kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		}
	}
	var exits []string
	for k, v := range o.Exits {
		exits = append(exits, fmt.Sprintf("%s×%d", k, v))
	}
	sort.Strings(exits)
	grants, overlaps := map[string]int{}, map[string]int{}
	for _, t := range o.Result.Trees {
		grants[mode(t.Lease)]++
	}
	for _, ov := range o.Result.Overlaps {
		overlaps[mode(ov.Lease)]++
	}
	frozen := ""
	if o.Faults[FaultFreeze] > 0 {
		frozen = fmt.Sprintf("; %d overlaps caused by a freeze (frozen trees lived at most %s after their thaw)",
			o.Result.Thawed, o.Result.AfterThaw.Round(time.Millisecond))
	}
	return fmt.Sprintf("supervisors: run %d, elect %d, run --permits %d ×%d (%d started); grants (command trees): run %d, elect %d, permits %d; faults: %s; overlaps: run %d, elect %d, permits %d; %d force-released trees late, %d overlaps excused by a force (forced trees lived at most %s after the force)%s, %d survivors; TTL %s, %s; exits %s",
		cfg.Run, cfg.Elect, cfg.Permits, cfg.Sem, o.Supervisors, grants[RunName], grants[ElectName], grants[SemName],
		strings.Join(kinds, ", "), overlaps[RunName], overlaps[ElectName], overlaps[SemName],
		len(o.Result.Late), o.Result.Excused, o.Result.AfterForce.Round(time.Millisecond), frozen, o.Survivors, cfg.TTL, o.Took.Round(time.Second), strings.Join(exits, " "))
}

// mode returns the name of the mode a lease belongs to: RunName, ElectName
// or SemName.
func mode(lease string) string {
	for _, n := range []string{RunName, ElectName, SemName} {
		if lease == n || strings.HasPrefix(lease, n+"/") {
			return n
		}
	}
	return lease
}

// Run runs the suite once: the supervisors, each restarted whenever it
// exits, under the faults, for cfg.Duration; then it stops them (SIGTERM),
// kills what is left and checks the heartbeat log.
func Run(t testing.TB, cfg Config) Outcome {
	t.Helper()
	if cfg.Beat == 0 {
		cfg.Beat = 5 * time.Millisecond
	}
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	h := &harness{t: t, cfg: cfg, exe: exe, log: filepath.Join(cfg.Dir, "beats.log"),
		marker: fmt.Sprintf("%d-%d", os.Getpid(), rand.Uint64()),
		rng:    rand.New(rand.NewPCG(cfg.Seed, 0x513)), faults: map[string]int{}, exits: map[string]int{}, paused: map[*os.Process]bool{},
		tail: newTailer(filepath.Join(cfg.Dir, "beats.log"))}
	// If the test fails half-way (a t.Fatal in a fault), stop the
	// supervisors and their commands anyway.
	defer h.abort()
	h.addSlots("run", cfg.Run, "run")
	h.addSlots("elect", cfg.Elect, "elect", "--on-lost", "restart")
	h.addSlots("sem", cfg.Sem, "run", "--permits", strconv.Itoa(cfg.Permits))
	stopTail := h.tail.run()
	defer stopTail()
	for _, s := range h.slots {
		h.wg.Add(1)
		go h.loop(s)
	}
	for end := time.Now().Add(cfg.Duration); time.Now().Before(end); {
		time.Sleep(verify.Between(h.rng, cfg.Gap[0], cfg.Gap[1]))
		h.inject(cfg.Faults[h.rng.IntN(len(cfg.Faults))])
		if cfg.StopAtOverlap && h.overlapSoFar() {
			break
		}
	}
	survivors := h.stop()

	f, err := os.Open(h.log)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var recs []Record
	bad := 0
	if f != nil {
		recs, bad, err = ParseLog(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	if cfg.FreezeBound == 0 {
		cfg.FreezeBound = time.Second
	}
	opts := CheckOptions{TTL: cfg.TTL, Forces: h.forces, Freezes: h.freezes, FreezeBound: cfg.FreezeBound}
	if cfg.Sem > 0 {
		opts.Permits = map[string]int{SemName: cfg.Permits}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return Outcome{Result: Check(recs, opts), Supervisors: h.started, Faults: h.faults, Exits: h.exits,
		Survivors: survivors, ForceTried: h.forceAttempted, BadLines: bad, Took: time.Since(start)}
}

// overlapSoFar reports whether the log written so far has an overlap.
func (h *harness) overlapSoFar() bool {
	f, err := os.Open(h.log)
	if err != nil {
		return false
	}
	defer f.Close()
	recs, _, err := ParseLog(f)
	if err != nil {
		return false
	}
	opts := CheckOptions{TTL: h.cfg.TTL}
	if h.cfg.Sem > 0 {
		opts.Permits = map[string]int{SemName: h.cfg.Permits}
	}
	return len(Check(recs, opts).Overlaps) > 0
}

// Logs returns the end of every supervisor's standard error, for a failure
// message.
func Logs(dir string) string {
	files, _ := filepath.Glob(filepath.Join(dir, "sup-*.log"))
	var b strings.Builder
	for _, f := range files {
		raw, _ := os.ReadFile(f)
		fmt.Fprintf(&b, "== %s\n%s\n", filepath.Base(f), verify.Clip(string(raw), 15))
	}
	return b.String()
}

type slot struct {
	id   string
	args []string
	proc *os.Process // while running
	n    int         // starts
}

type harness struct {
	t              testing.TB
	cfg            Config
	exe, log       string
	marker         string
	rng            *rand.Rand // the test goroutine's
	tail           *tailer
	wg             sync.WaitGroup
	mu             sync.Mutex
	slots          []*slot
	paused         map[*os.Process]bool // supervisors stopped by a fault, until their SIGCONT
	stopping       bool
	started        int
	faults, exits  map[string]int
	forces         []Force
	freezes        []Freeze
	forceAttempted int
}

func (h *harness) addSlots(prefix string, n int, verb ...string) {
	name := map[string]string{"run": RunName, "elect": ElectName, "sem": SemName}[prefix]
	for i := range n {
		args := append([]string{verb[0], "--store", h.cfg.Target.URL, "--ttl", h.cfg.TTL.String()}, verb[1:]...)
		args = append(args, name, "--", h.exe, "-test.run=^$")
		h.slots = append(h.slots, &slot{id: fmt.Sprintf("%s%d", prefix, i), args: args})
	}
}

// loop runs slot s's supervisor again and again until the harness stops.
func (h *harness) loop(s *slot) {
	defer h.wg.Done()
	out, err := os.OpenFile(filepath.Join(h.cfg.Dir, "sup-"+s.id+".log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		h.t.Error(err)
		return
	}
	defer out.Close()
	spec := commandSpec{log: h.log, min: h.cfg.Work[0], max: h.cfg.Work[1], beat: h.cfg.Beat}
	for {
		h.mu.Lock()
		if h.stopping {
			h.mu.Unlock()
			return
		}
		s.n++
		sup := fmt.Sprintf("%s.%d", s.id, s.n)
		cmd := exec.Command(h.cfg.Bin, s.args...)
		cmd.Env = append(cleanEnv(), EnvCommand+"="+spec.String(), EnvSupervisor+"="+sup, EnvRun+"="+h.marker)
		if h.cfg.Mutation != "" {
			cmd.Env = append(cmd.Env, "LEASEHOLD_MUTATION="+h.cfg.Mutation)
		}
		cmd.Stdout, cmd.Stderr = out, out
		// Its own process group, as a service manager would start it; the
		// faults signal its PID only.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		fmt.Fprintf(out, "== %s starts at %d\n", sup, verify.Mono())
		if err := cmd.Start(); err != nil {
			h.mu.Unlock()
			h.t.Errorf("start supervisor %s: %v", sup, err)
			return
		}
		s.proc = cmd.Process
		h.started++
		h.mu.Unlock()
		err := cmd.Wait()
		status := "0"
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			status = ee.ProcessState.String()
			if c := ee.ExitCode(); c >= 0 {
				status = strconv.Itoa(c)
			}
		}
		fmt.Fprintf(out, "== %s exited (%s) at %d\n", sup, status, verify.Mono())
		h.mu.Lock()
		s.proc = nil
		h.exits[status]++
		h.mu.Unlock()
		time.Sleep(50 * time.Millisecond)
		if status == "70" {
			time.Sleep(300 * time.Millisecond) // the store is down
		}
	}
}

// stop stops the supervisors (SIGTERM, which they forward to their
// commands), waits for them, and returns the number of command processes
// still running one TTL later, which it kills.
func (h *harness) stop() int {
	h.mu.Lock()
	h.stopping = true
	for _, s := range h.slots {
		if s.proc != nil {
			_ = s.proc.Signal(syscall.SIGCONT)
			_ = s.proc.Signal(syscall.SIGTERM)
		}
	}
	h.mu.Unlock()
	done := make(chan struct{})
	go func() { h.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		h.mu.Lock()
		for _, s := range h.slots {
			if s.proc != nil {
				h.t.Logf("supervisor %s.%d did not stop within 30 s of SIGTERM: SIGKILL", s.id, s.n)
				_ = s.proc.Kill()
			}
		}
		h.mu.Unlock()
		<-done
	}
	time.Sleep(h.cfg.TTL)
	return h.killCommands()
}
