package verify

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Group is a set of worker processes started by StartWorkers, and the
// history they write.
type Group struct {
	t    testing.TB
	cfg  WorkerConfig
	mu   sync.Mutex
	cmds []*exec.Cmd
	done []chan struct{}
	evs  []Event
	logs []string
	wg   sync.WaitGroup
	// starts counts how often each worker was started (RestartWorker).
	starts map[int]int
}

// StartWorkers starts n worker processes running cfg. They are copies of
// the current executable (the test binary), which must call MaybeWorker in
// its TestMain. Worker i gets ID "w<i>" and seed cfg.Seed+i; see
// RestartWorker for the IDs of restarted workers.
func StartWorkers(t testing.TB, n int, cfg WorkerConfig) *Group {
	t.Helper()
	g := &Group{t: t, cfg: cfg}
	for i := 0; i < n; i++ {
		g.start(i)
	}
	t.Cleanup(func() { g.Kill() })
	return g
}

func (g *Group) start(i int) {
	g.t.Helper()
	cfg := g.cfg
	g.mu.Lock()
	if g.starts == nil {
		g.starts = map[int]int{}
	}
	n := g.starts[i]
	g.starts[i]++
	g.mu.Unlock()
	cfg.ID = fmt.Sprintf("w%d", i)
	if n > 0 {
		cfg.ID = fmt.Sprintf("w%dr%d", i, n)
	}
	if cfg.Seed != 0 {
		cfg.Seed += uint64(i) + uint64(n)<<32
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		g.t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		g.t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), EnvWorker+"="+string(raw))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		g.t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		g.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		g.t.Fatalf("start worker: %v", err)
	}
	done := make(chan struct{})
	g.mu.Lock()
	for len(g.cmds) <= i {
		g.cmds = append(g.cmds, nil)
		g.done = append(g.done, nil)
	}
	g.cmds[i], g.done[i] = cmd, done
	g.mu.Unlock()
	var readers sync.WaitGroup
	readers.Add(2)
	go func() {
		defer readers.Done()
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		for sc.Scan() {
			var ev Event
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				g.addLog(cfg.ID + ": bad event: " + sc.Text())
				continue
			}
			g.mu.Lock()
			g.evs = append(g.evs, ev)
			g.mu.Unlock()
		}
	}()
	go func() {
		defer readers.Done()
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			g.addLog(cfg.ID + " stderr: " + sc.Text())
		}
	}()
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		readers.Wait()
		err := cmd.Wait()
		if err != nil {
			g.addLog(fmt.Sprintf("%s exited: %v", cfg.ID, err))
		}
		close(done)
	}()
}

func (g *Group) addLog(s string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.logs = append(g.logs, s)
}

// Len is the number of workers.
func (g *Group) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.cmds)
}

// Pid returns worker i's OS process id.
func (g *Group) Pid(i int) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cmds[i].Process.Pid
}

// Signal sends sig to worker i.
func (g *Group) Signal(i int, sig syscall.Signal) {
	g.mu.Lock()
	cmd := g.cmds[i]
	g.mu.Unlock()
	_ = cmd.Process.Signal(sig)
}

// KillWorker sends SIGKILL to worker i and waits until it is gone; Restart
// starts it again (same id, same configuration).
func (g *Group) KillWorker(i int) {
	g.Signal(i, syscall.SIGKILL)
	g.mu.Lock()
	done := g.done[i]
	g.mu.Unlock()
	<-done
}

// RestartWorker starts worker i again after KillWorker, as a new process
// with the same configuration but its own ID, "w<i>r<n>" for its n-th
// restart (and its own seed): its operations are numbered from 1 again and
// must not pair with the calls its killed predecessor left unanswered, and
// its owner identities are its own.
func (g *Group) RestartWorker(i int) { g.start(i) }

// Wait waits for every worker to finish its cycles, at most timeout; it
// fails the test if they do not.
func (g *Group) Wait(timeout time.Duration) {
	g.t.Helper()
	ch := make(chan struct{})
	go func() { g.wg.Wait(); close(ch) }()
	select {
	case <-ch:
	case <-time.After(timeout):
		g.Kill()
		g.t.Fatalf("workers did not finish in %s", timeout)
	}
}

// Stop asks every worker to finish (SIGTERM, after SIGCONT in case one is
// paused) and waits for them.
func (g *Group) Stop(timeout time.Duration) {
	g.t.Helper()
	for i := 0; i < g.Len(); i++ {
		g.Signal(i, syscall.SIGCONT)
		g.Signal(i, syscall.SIGTERM)
	}
	g.Wait(timeout)
}

// Kill kills every worker and waits for them.
func (g *Group) Kill() {
	for i := 0; i < g.Len(); i++ {
		g.Signal(i, syscall.SIGKILL)
	}
	g.wg.Wait()
}

// History returns the events recorded so far.
func (g *Group) History() *History {
	g.mu.Lock()
	defer g.mu.Unlock()
	return &History{Events: append([]Event(nil), g.evs...)}
}

// Logs returns the workers' log events and standard error lines, for a
// failure message.
func (g *Group) Logs() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var b strings.Builder
	for _, l := range g.logs {
		b.WriteString(l + "\n")
	}
	for _, ev := range g.evs {
		if ev.E == "log" {
			b.WriteString(ev.Worker + ": " + ev.Msg + "\n")
		}
	}
	return b.String()
}
