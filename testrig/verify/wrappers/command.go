package wrappers

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/testrig/verify"
)

// The environment of a command run under a supervisor. The harness sets
// EnvCommand (and EnvSupervisor, EnvRun) on each supervisor, which passes
// its environment on to its command: the test binary again, which
// MaybeCommand turns into the child. The child starts the grandchild with
// EnvRole set.
const (
	// EnvCommand is "LOG;MIN;MAX;BEAT": the heartbeat log, the range the
	// grandchild's running time is drawn from, and the heartbeat period
	// (Go durations).
	EnvCommand = "LEASEHOLD_R13_COMMAND"
	// EnvSupervisor names the supervisor ("run0.3": slot run0, fourth
	// start), so that a tree can be traced to its supervisor.
	EnvSupervisor = "LEASEHOLD_R13_SUPERVISOR"
	// EnvRun is a marker unique to one run of the suite, by which the
	// harness finds the run's command processes to clean up.
	EnvRun = "LEASEHOLD_R13_RUN"
	// EnvRole is "grandchild" in the grandchild.
	EnvRole = "LEASEHOLD_R13_ROLE"
)

// commandSpec is EnvCommand decoded.
type commandSpec struct {
	log      string
	min, max time.Duration
	beat     time.Duration
}

func (c commandSpec) String() string {
	return fmt.Sprintf("%s;%s;%s;%s", c.log, c.min, c.max, c.beat)
}

func parseSpec(s string) (commandSpec, error) {
	f := strings.Split(s, ";")
	if len(f) != 4 {
		return commandSpec{}, fmt.Errorf("%s=%q: want LOG;MIN;MAX;BEAT", EnvCommand, s)
	}
	c := commandSpec{log: f[0]}
	var err error
	for i, p := range []*time.Duration{&c.min, &c.max, &c.beat} {
		if *p, err = time.ParseDuration(f[i+1]); err != nil {
			return commandSpec{}, fmt.Errorf("%s: %v", EnvCommand, err)
		}
	}
	if c.beat <= 0 || c.max < c.min {
		return commandSpec{}, fmt.Errorf("%s=%q: bad durations", EnvCommand, s)
	}
	return c, nil
}

// MaybeCommand turns the process into a command of the suite — the child
// or the grandchild of a command tree — when EnvCommand and LEASEHOLD_TOKEN
// (set by the supervisor) are both set, and never returns then. Test
// binaries of the suite call it first thing in TestMain.
//
// The child starts the grandchild (this binary again), beats until the
// grandchild has exited and exits 0: the shape of `sh -c '(work) & wait'`.
// The grandchild beats for a running time drawn from [MIN, MAX] and exits
// 0. Neither handles any signal: SIGTERM and SIGKILL end each of them at
// once, and a child that dies leaves its grandchild running (an orphan),
// as a shell does.
//
// Each process appends to the log, with one write(2) of a short line
// opened O_APPEND (so lines of several processes never mix):
//
//	S|B|E ROLE PID SUPERVISOR LEASE TOKEN MONO
//
// S at its start, B every BEAT, E when it exits by itself; LEASE is
// $LEASEHOLD_PERMIT if set (a permit of a semaphore), else $LEASEHOLD_NAME;
// MONO is verify.Mono (CLOCK_MONOTONIC, ns).
func MaybeCommand() {
	raw, token := os.Getenv(EnvCommand), os.Getenv("LEASEHOLD_TOKEN")
	if raw == "" || token == "" {
		return
	}
	spec, err := parseSpec(raw)
	if err != nil {
		fmt.Fprintln(os.Stderr, "r13 command:", err)
		os.Exit(2)
	}
	role := "child"
	if os.Getenv(EnvRole) == "grandchild" {
		role = "grandchild"
	}
	lease := os.Getenv("LEASEHOLD_PERMIT")
	if lease == "" {
		lease = os.Getenv("LEASEHOLD_NAME")
	}
	sup := os.Getenv(EnvSupervisor)
	if sup == "" {
		sup = "-"
	}
	f, err := os.OpenFile(spec.log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "r13 command:", err)
		os.Exit(2)
	}
	prefix := fmt.Sprintf(" %s %d %s %s %s ", role, os.Getpid(), sup, lease, token)
	write := func(kind byte) {
		line := make([]byte, 0, 96)
		line = append(line, kind)
		line = append(line, prefix...)
		line = strconv.AppendInt(line, verify.Mono(), 10)
		line = append(line, '\n')
		if _, err := f.Write(line); err != nil {
			fmt.Fprintln(os.Stderr, "r13 command:", err)
			os.Exit(2)
		}
	}
	write('S')
	if role == "grandchild" {
		d := spec.min
		if spec.max > spec.min {
			d += time.Duration(rand.Int64N(int64(spec.max - spec.min)))
		}
		stop := make(chan struct{})
		time.AfterFunc(d, func() { close(stop) })
		beat(write, spec.beat, stop)
		write('E')
		os.Exit(0)
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "r13 command:", err)
		os.Exit(2)
	}
	gc := exec.Command(exe, "-test.run=^$")
	gc.Env = append(os.Environ(), EnvRole+"=grandchild")
	gc.Stdout, gc.Stderr = os.Stdout, os.Stderr
	if err := gc.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "r13 command: start the grandchild:", err)
		os.Exit(2)
	}
	exited := make(chan struct{})
	go func() { _ = gc.Wait(); close(exited) }()
	beat(write, spec.beat, exited)
	write('E')
	os.Exit(0)
}

// beat writes a B line every period until stop.
func beat(write func(byte), period time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		write('B')
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}
