package wrappers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/stores"
	"github.com/leasehold/leasehold/testrig/verify"
)

// pick returns a slot whose supervisor runs a command right now, or any
// running slot if none does, and its process (nil if none runs).
func (h *harness) pick() (*slot, *os.Process, string) {
	holding := h.tail.holders(150 * time.Millisecond)
	h.mu.Lock()
	defer h.mu.Unlock()
	var cands, running []*slot
	for _, s := range h.slots {
		if s.proc == nil || h.paused[s.proc] {
			continue
		}
		running = append(running, s)
		if _, ok := holding[fmt.Sprintf("%s.%d", s.id, s.n)]; ok {
			cands = append(cands, s)
		}
	}
	if len(cands) == 0 {
		cands = running
	}
	if len(cands) == 0 {
		return nil, nil, ""
	}
	s := cands[h.rng.IntN(len(cands))]
	return s, s.proc, holding[fmt.Sprintf("%s.%d", s.id, s.n)]
}

func (h *harness) count(kind string) {
	h.mu.Lock()
	h.faults[kind]++
	h.mu.Unlock()
}

// inject applies one fault of the kind. It returns when the fault is
// over, except a stop: that supervisor is continued later, by a timer,
// while other faults go on.
func (h *harness) inject(kind string) {
	switch kind {
	case FaultKill, FaultStop, FaultTerm:
		_, p, _ := h.pick()
		if p == nil {
			return
		}
		sig := map[string]syscall.Signal{FaultKill: syscall.SIGKILL, FaultStop: syscall.SIGSTOP, FaultTerm: syscall.SIGTERM}[kind]
		if p.Signal(sig) != nil {
			return // it had exited
		}
		h.count(kind)
		if kind == FaultStop {
			h.mu.Lock()
			h.paused[p] = true
			h.mu.Unlock()
			time.AfterFunc(verify.Between(h.rng, 3*h.cfg.TTL/2, 3*h.cfg.TTL), func() {
				h.mu.Lock()
				delete(h.paused, p)
				h.mu.Unlock()
				_ = p.Signal(syscall.SIGCONT)
			})
		}
	case FaultEngine:
		h.cfg.Target.Kill()
		h.count(kind)
		time.Sleep(verify.Between(h.rng, 500*time.Millisecond, time.Second))
		h.cfg.Target.Start()
	case FaultForce:
		_, _, lease := h.pick()
		if lease == "" {
			return
		}
		h.force(lease)
	case FaultFreeze:
		h.freeze()
	default:
		h.t.Fatalf("unknown fault %q", kind)
	}
}

// forcer is the admin side of the server's stores (remote.RESPStore).
type forcer interface {
	ForceRelease(ctx context.Context, name string) (leasehold.Record, error)
}

func (h *harness) force(lease string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := stores.Open(ctx, h.cfg.Target.URL)
	if err != nil {
		h.t.Logf("force-release: open %s: %v", h.cfg.Target.URL, err)
		return
	}
	defer st.Close()
	fs, ok := st.(forcer)
	if !ok {
		h.t.Fatalf("force-release: the store of %s has no ForceRelease", h.cfg.Target.Name)
	}
	call := verify.Mono()
	rec, err := fs.ForceRelease(ctx, lease)
	ret := verify.Mono()
	h.mu.Lock()
	h.forceAttempted++
	h.mu.Unlock()
	if err != nil {
		if !errors.Is(err, leasehold.ErrNotFound) {
			h.t.Logf("force-release %s: %v", lease, err)
		}
		return
	}
	h.mu.Lock()
	h.forces = append(h.forces, Force{Lease: lease, Token: rec.Token, Call: call, Return: ret})
	h.mu.Unlock()
	h.count(FaultForce)
}

// abort SIGKILLs the supervisors, stops restarting them, waits for their
// loops and SIGKILLs the commands left. After stop it finds nothing to do.
func (h *harness) abort() {
	h.mu.Lock()
	h.stopping = true
	for _, s := range h.slots {
		if s.proc != nil {
			_ = s.proc.Kill()
		}
	}
	h.mu.Unlock()
	h.wg.Wait()
	h.killCommands()
}

// killCommands SIGKILLs every command process of this run still running
// (this executable with the run's marker in its environment) and returns
// how many there were.
func (h *harness) killCommands() int {
	n := 0
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", d.Name(), "exe"))
		if err != nil || exe != h.exe {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", d.Name(), "environ"))
		if err != nil || !bytes.Contains(env, []byte(EnvRun+"="+h.marker+"\x00")) {
			continue
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			n++
		}
	}
	return n
}

// freeze stops a supervisor whose command runs and that command's process
// group together, for 1.5–3 × TTL, then continues both (FaultFreeze).
func (h *harness) freeze() {
	s, p, lease := h.pick()
	if p == nil || lease == "" {
		return
	}
	h.mu.Lock()
	sup := fmt.Sprintf("%s.%d", s.id, s.n)
	h.mu.Unlock()
	rec, ok := h.tail.latest(sup)
	if !ok {
		return
	}
	pgrp := h.commandGroup(rec.Pid)
	if pgrp <= 1 || pgrp == syscall.Getpgrp() {
		return
	}
	stop := verify.Mono()
	if p.Signal(syscall.SIGSTOP) != nil {
		return
	}
	_ = syscall.Kill(-pgrp, syscall.SIGSTOP)
	h.count(FaultFreeze)
	time.Sleep(verify.Between(h.rng, 3*h.cfg.TTL/2, 3*h.cfg.TTL))
	thaw := verify.Mono()
	_ = syscall.Kill(-pgrp, syscall.SIGCONT)
	_ = p.Signal(syscall.SIGCONT)
	h.mu.Lock()
	h.freezes = append(h.freezes, Freeze{Lease: rec.Lease, Token: rec.Token, Stop: stop, Thaw: thaw})
	h.mu.Unlock()
}

// commandGroup returns the process group of pid if pid is a command of
// this run, else 0.
func (h *harness) commandGroup(pid int) int {
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	if exe, err := os.Readlink(filepath.Join(dir, "exe")); err != nil || exe != h.exe {
		return 0
	}
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return 0
	}
	// pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
	f := bytes.Fields(stat[bytes.LastIndexByte(stat, ')')+1:])
	if len(f) < 3 {
		return 0
	}
	pg, _ := strconv.Atoi(string(f[2]))
	return pg
}
