package workflows

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/stores"
	"github.com/leasehold/leasehold/testrig/verify"
	"github.com/leasehold/leasehold/workflow"
)

// Trial is one run of the suite: Procs workers on one instance.
type Trial struct {
	Target     verify.Target // Name "memory" with URL "" runs in-process values on one memory store
	Strategy   workflow.Strategy
	LocalQueue bool
	Procs      int // workers (processes; in-process values on memory)
	Clients    int // per worker
	Duration   time.Duration
	Kills      int  // workers killed (SIGKILL) and replaced during the run
	Restart    bool // the engine is killed and started again once
	LockWait   time.Duration
	LeaseTTL   time.Duration
	Seed       uint64
	// API, when positive, runs that many `leasehold serve --store
	// Target.URL --workflows ...` processes, each its own Workflows, and
	// the workers call their workflow HTTP API; Kills then kill and restart
	// those servers (the workers stay).
	API int
	// Mix, when set, gives worker i the strategy Mix[i mod len(Mix)]
	// instead of Strategy: several strategies on one instance.
	Mix []workflow.Strategy
	// Handoff: lost replies are asked again through another worker
	// process (Config.Handoff).
	Handoff bool
	// LostPercent is Config.LostPercent.
	LostPercent int
	// KillQueueHolder: each kill takes the worker that holds the
	// instance's queue lease (Adaptive's), if one does within a second.
	KillQueueHolder bool
}

// Outcome is what a trial recorded and what Check said of it.
type Outcome struct {
	Calls  []Call
	Hist   []workflow.Entry
	Result Result
	Faults int
	// MaxGap is the longest time without a transition: between two
	// history entries, or from the last one to the end of the run.
	MaxGap time.Duration
	// Errors counts the transitions answered with a store error;
	// Deadlocks those of them that were PostgreSQL deadlocks (SQLSTATE
	// 40P01).
	Errors, Deadlocks int
}

// RunTrial runs tr and checks it.
func RunTrial(t *testing.T, tr Trial) Outcome {
	t.Helper()
	name := fmt.Sprintf("r16%x", tr.Seed&0xffffff)
	base := Config{Workflow: name, Instance: "i", Strategy: tr.Strategy, LocalQueue: tr.LocalQueue,
		Clients: tr.Clients, Duration: tr.Duration, LockWait: tr.LockWait, LeaseTTL: tr.LeaseTTL, Store: tr.Target.URL}
	ctx := context.Background()
	var rs leasehold.RecordStore
	var ls leasehold.Store // the harness's own client of the store (nil on memory)
	var mem *memory.Store
	if tr.Target.URL == "" {
		mem = memory.New()
		rs = mem
	} else {
		st, err := stores.Open(ctx, tr.Target.URL)
		if err != nil {
			t.Fatalf("open %s: %v", tr.Target.Name, err)
		}
		defer st.Close()
		ls = st
		var ok bool
		if rs, ok = st.(leasehold.RecordStore); !ok {
			t.Fatalf("%s keeps no records", tr.Target.Name)
		}
	}
	w, err := workflow.New(Chain(name), workflow.Config{Records: rs, Strategy: workflow.Optimistic})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Create(ctx, "i"); err != nil {
		t.Fatalf("create: %v", err)
	}
	var log callLog
	hand := &handoffs{}
	emit := func(c Call) {
		log.emit(c)
		if c.Op == "handoff" {
			hand.send(c)
		}
	}
	base.Handoff, base.LostPercent = tr.Handoff, tr.LostPercent
	out := Outcome{}
	var apis []verify.Target
	for i := range tr.API {
		apis = append(apis, startAPI(t, tr, name))
		base.HTTP = append(base.HTTP, "http://"+apis[i].HTTPAddr)
	}
	runStart := time.Now()
	var wg sync.WaitGroup
	if mem != nil {
		for p := range tr.Procs {
			cfg := base
			cfg.ID, cfg.Seed = "p"+strconv.Itoa(p), tr.Seed+uint64(p)*7919
			if len(tr.Mix) > 0 {
				cfg.Strategy = tr.Mix[p%len(tr.Mix)]
			}
			wp, err := New(cfg, mem, mem)
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() { Run(ctx, cfg, func(int) Service { return wp }, emit) })
		}
		wg.Wait()
	} else {
		procs := make([]*workerProc, 0, tr.Procs+tr.Kills)
		start := func(i int) *workerProc {
			cfg := base
			cfg.ID, cfg.Seed = "p"+strconv.Itoa(i), tr.Seed+uint64(i)*7919
			if len(tr.Mix) > 0 {
				cfg.Strategy = tr.Mix[i%len(tr.Mix)]
			}
			p := startWorker(t, cfg, emit)
			procs = append(procs, p)
			hand.add(p)
			return p
		}
		live := make([]*workerProc, tr.Procs)
		for i := range tr.Procs {
			live[i] = start(i)
		}
		faults := tr.Kills
		if tr.Restart {
			faults++
		}
		// Faults at even intervals through the middle of the run.
		step := tr.Duration / time.Duration(faults+2)
		for k := 0; k < faults; k++ {
			time.Sleep(step)
			if k == 0 && tr.Restart {
				tr.Target.Kill()
				time.Sleep(500 * time.Millisecond)
				tr.Target.Start()
				out.Faults++
				continue
			}
			if len(apis) > 0 {
				a := apis[k%len(apis)]
				a.Kill()
				a.Start()
				out.Faults++
				continue
			}
			i := k % tr.Procs
			if tr.KillQueueHolder {
				i = queueHolder(ls, name, live, i)
			}
			hand.remove(live[i])
			live[i].kill()
			out.Faults++
			// The replacement runs for what is left of the run.
			live[i] = start(tr.Procs + k)
		}
		for _, p := range procs {
			p.wait(tr.Duration + 90*time.Second)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var hist []workflow.Entry
	for attempt := 0; ; attempt++ {
		if hist, err = w.History(rctx, "i"); err == nil || attempt == 20 {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("history: %v", err)
	}
	out.Calls, out.Hist = log.all(), hist
	out.Result = Check(Chain(name), out.Calls, hist)
	// The run ends when the workers stop starting operations, or, if an
	// operation was still waiting then (a stall), when the last one ended.
	end := runStart.Add(tr.Duration)
	mono0 := verify.MonoOf(runStart)
	for _, c := range out.Calls {
		if c.Op == "transition" && c.Kind != "stopped" {
			end = later(end, runStart.Add(time.Duration(c.End-mono0)))
		}
	}
	out.MaxGap = maxGap(hist, end)
	for _, c := range out.Calls {
		if c.Op == "transition" && c.Answer == AnsError {
			out.Errors++
			if strings.Contains(c.Err, "40P01") {
				out.Deadlocks++
			}
		}
	}
	return out
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// maxGap is the longest time between two entries of hist, or from the
// last one to end.
func maxGap(hist []workflow.Entry, end time.Time) time.Duration {
	var gap time.Duration
	for i := 1; i < len(hist); i++ {
		gap = max(gap, hist[i].At.Sub(hist[i-1].At))
	}
	if n := len(hist); n > 0 {
		gap = max(gap, end.Sub(hist[n-1].At))
	}
	return gap
}

// queueHolder returns the index in live of the worker that holds the
// instance's queue lease (owner "r16-" + its ID), waiting up to a second
// for one to hold it; otherwise def.
func queueHolder(ls leasehold.Store, name string, live []*workerProc, def int) int {
	if ls == nil {
		return def
	}
	lease := "wf/" + name + "/queue/i"
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		r, err := ls.Get(ctx, lease)
		cancel()
		if err != nil {
			continue
		}
		for i, p := range live {
			if "r16-"+p.id == r.Owner {
				return i
			}
		}
	}
	return def
}

// handoffs passes the requests a worker hands over (Config.Handoff) to
// another live worker, in turn.
type handoffs struct {
	mu    sync.Mutex
	procs []*workerProc
	next  int
}

func (h *handoffs) add(p *workerProc) {
	h.mu.Lock()
	h.procs = append(h.procs, p)
	h.mu.Unlock()
}

func (h *handoffs) remove(p *workerProc) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, x := range h.procs {
		if x == p {
			h.procs = append(h.procs[:i:i], h.procs[i+1:]...)
			return
		}
	}
}

func (h *handoffs) send(c Call) {
	b, _ := json.Marshal(Job{Actor: c.Actor, From: c.From, To: c.To, RequestID: c.RequestID})
	b = append(b, '\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	for range h.procs {
		h.next++
		p := h.procs[h.next%len(h.procs)]
		if p.id == c.Worker || p.stdin == nil {
			continue
		}
		_, _ = p.stdin.Write(b)
		return
	}
}

type workerProc struct {
	t     *testing.T
	id    string
	cmd   *exec.Cmd
	stdin io.WriteCloser // Config.Handoff's jobs (nil without)
	done  chan struct{}
	end   time.Time
}

func startWorker(t *testing.T, cfg Config, emit func(Call)) *workerProc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(cfg)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), EnvWorker+"="+string(raw))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &workerProc{t: t, id: cfg.ID, cmd: cmd, done: make(chan struct{})}
	if cfg.Handoff {
		if p.stdin, err = cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start worker: %v", err)
	}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var c Call
			if json.Unmarshal(sc.Bytes(), &c) == nil {
				emit(c)
			}
		}
		_ = cmd.Wait()
	}()
	return p
}

func (p *workerProc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

func (p *workerProc) wait(limit time.Duration) {
	select {
	case <-p.done:
	case <-time.After(limit):
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		p.t.Errorf("worker %d still running after %s: stopped", p.cmd.Process.Pid, limit)
		<-p.done
	}
}

// Serve runs `leasehold serve` with its own durable engine in a temporary
// directory and returns it as a target whose URL is its HTTP API (records
// and leases); Kill and Start stop and restart the process on the same data.
func Serve(t *testing.T) verify.Target {
	t.Helper()
	tg := verify.StartServe(t, "--data-dir", t.TempDir())
	return verify.Target{Name: "server", URL: "http://" + tg.HTTPAddr, Addr: tg.HTTPAddr, HTTPAddr: tg.HTTPAddr,
		Kill: tg.Kill, Start: tg.Start}
}

// startAPI runs a `leasehold serve` in front of the trial's store, serving
// the trial's definition with its strategy (verify.StartServe: its
// HTTPAddr is the API).
func startAPI(t *testing.T, tr Trial, name string) verify.Target {
	t.Helper()
	def := Chain(name)
	wf := map[string]any{"name": name, "initial": def.Initial, "transitions": def.Transitions, "strategy": string(tr.Strategy)}
	if tr.LockWait > 0 {
		wf["lock_wait"] = tr.LockWait.String()
	}
	if tr.LeaseTTL > 0 {
		wf["lease_ttl"] = tr.LeaseTTL.String()
	}
	f := map[string]any{"workflows": []map[string]any{wf}}
	b, _ := json.Marshal(f)
	path := t.TempDir() + "/workflows.json"
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return verify.StartServe(t, "--store", tr.Target.URL, "--workflows", path)
}

// callLog collects the calls that workers emit, from any goroutine.
type callLog struct {
	mu    sync.Mutex
	calls []Call
}

func (l *callLog) emit(c Call) {
	l.mu.Lock()
	l.calls = append(l.calls, c)
	l.mu.Unlock()
}

func (l *callLog) all() []Call {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls
}
