package stepfn

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/testrig/verify"
)

// CommandArg is the first argument of the command that a "leasehold run"
// of R14 runs — this test binary again, with a commandConfig (JSON) as
// the second argument (MaybeCommand). An argument, not an environment
// variable: the supervisor and its command share the environment.
const CommandArg = "leasehold-r14-command"

type commandConfig struct {
	Oracle string
	Key    string
	Proc   string
	Log    string // file the command appends its start and end lines to
	Hold   time.Duration
}

// commandLine is one line of a command's log.
type commandLine struct {
	Proc  string `json:"p"`
	E     string `json:"e"` // "start" or "end"
	T     int64  `json:"t"` // verify.Mono
	Token uint64 `json:"tok"`
	Wrote bool   `json:"wrote,omitempty"`
}

// MaybeCommand turns the process into R14's "leasehold run" command when
// its arguments are CommandArg and a configuration, and never returns
// then: it takes LEASEHOLD_TOKEN, logs its start, does the fenced
// increment of the oracle, and logs its end. TestMain calls it before
// verify.MaybeWorker (the command inherits the environment that made its
// parent the leasehold command line).
func MaybeCommand() {
	if len(os.Args) != 3 || os.Args[1] != CommandArg {
		return
	}
	var cfg commandConfig
	if err := json.Unmarshal([]byte(os.Args[2]), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "R14 command: bad configuration: %v\n", err)
		os.Exit(2)
	}
	token, err := strconv.ParseUint(os.Getenv("LEASEHOLD_TOKEN"), 10, 64)
	if err != nil {
		fmt.Fprintf(os.Stderr, "R14 command: LEASEHOLD_TOKEN: %v\n", err)
		os.Exit(2)
	}
	f, err := os.OpenFile(cfg.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "R14 command: %v\n", err)
		os.Exit(2)
	}
	logLine := func(l commandLine) {
		b, _ := json.Marshal(l)
		_, _ = f.Write(append(b, '\n')) // one write per line: O_APPEND keeps lines whole
	}
	logLine(commandLine{Proc: cfg.Proc, E: "start", T: verify.Mono(), Token: token})
	wrote, err := newOracleClient(cfg.Oracle).increment(context.Background(), cfg.Key, cfg.Proc, token, cfg.Hold)
	if err != nil && !errors.Is(err, errStale) {
		fmt.Fprintf(os.Stderr, "R14 command %s: %v\n", cfg.Proc, err)
	}
	logLine(commandLine{Proc: cfg.Proc, E: "end", T: verify.Mono(), Token: token, Wrote: wrote})
	os.Exit(0)
}

// runLoop runs "leasehold run --store STORE --ttl TTL LOCK -- CMD" again
// and again until soft ends; at hard a run still going gets SIGTERM
// (which it forwards to its command). Each command's critical section is
// recorded from its start to its end, or to its supervisor's exit if it
// logged no end.
func (tr *trial) runLoop(t testing.TB, soft, hard context.Context, i int) {
	exe, err := os.Executable()
	if err != nil {
		tr.logf("run loop: %v", err)
		return
	}
	log := filepath.Join(tr.cfg.Dir, fmt.Sprintf("run%d.log", i))
	exits := map[string]int64{}
	for n := 0; soft.Err() == nil; n++ {
		proc := fmt.Sprintf("run%d-%d", i, n)
		cc, _ := json.Marshal(commandConfig{Oracle: tr.env.Oracle.URL(), Key: tr.cfg.Lock, Proc: proc, Log: log, Hold: tr.between(tr.cfg.Hold)})
		cmd, err := verify.CLICommand(hard, "run", "--store", tr.env.StoreURL, "--ttl", tr.cfg.TTL.String(), tr.cfg.Lock, "--", exe, CommandArg, string(cc))
		if err != nil {
			tr.logf("run loop: %v", err)
			break
		}
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
		cmd.WaitDelay = 10 * time.Second
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err = cmd.Run()
		exits[proc] = verify.Mono()
		tr.count("leasehold run", 1)
		select {
		case <-soft.Done():
		case <-time.After(tr.between(tr.cfg.Gap)):
		}
		if err != nil && hard.Err() == nil {
			tr.logf("%s: %v: %s", proc, err, verify.Clip(stderr.String(), 5))
			tr.count("leasehold run failed", 1)
			time.Sleep(time.Second) // not a busy loop of failures
		}
	}
	tr.readCommandLog(log, exits)
}

func (tr *trial) readCommandLog(path string, exits map[string]int64) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err != nil {
		tr.logf("%v", err)
		return
	}
	defer f.Close()
	starts := map[string]commandLine{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l commandLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			tr.logf("run log: %v: %s", err, sc.Text())
			continue
		}
		if l.E == "start" {
			starts[l.Proc] = l
			continue
		}
		s, ok := starts[l.Proc]
		if !ok {
			continue
		}
		delete(starts, l.Proc)
		tr.emit(verify.Event{E: "cs", Worker: "run", Proc: l.Proc, Key: tr.cfg.Lock, Token: s.Token, From: s.T, To: l.T, Wrote: l.Wrote, T: l.T})
	}
	for p, s := range starts { // no end logged: it ran until its supervisor exited, at the latest
		tr.count("run command without an end", 1)
		tr.emit(verify.Event{E: "cs", Worker: "run", Proc: p, Key: tr.cfg.Lock, Token: s.Token, From: s.T, To: exits[p], T: exits[p]})
	}
}
