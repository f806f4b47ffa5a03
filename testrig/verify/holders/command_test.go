package holders

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/testrig/verify"
)

// envCommand makes the test binary the command of a `leasehold run` row
// when `leasehold run` starts it (LEASEHOLD_TOKEN set): "LOG;SHAPE".
//
// SHAPE "tree": a child that starts a grandchild (this binary again,
// envRole=grandchild) and waits for it; both ignore SIGTERM, so only a
// SIGKILL stops them, and both beat until then. SHAPE "leftover": the
// child starts a grandchild that ignores SIGTERM and beats for ever, beats
// itself for 300 ms and exits 0, leaving the grandchild behind in the
// group (what the keeper stops after the command exits).
//
// Each process appends lines to LOG, one write(2) each (O_APPEND):
//
//	S|B|E ROLE PID TOKEN MONO
//
// S at its start, B every 5 ms, E when it exits by itself; MONO is
// verify.Mono.
const (
	envCommand = "LEASEHOLD_R17_COMMAND"
	envRole    = "LEASEHOLD_R17_ROLE"
)

// beatEvery is the commands' heartbeat period.
const beatEvery = 5 * time.Millisecond

func maybeCommand() {
	raw, token := os.Getenv(envCommand), os.Getenv("LEASEHOLD_TOKEN")
	if raw == "" || token == "" {
		return
	}
	path, shape, ok := strings.Cut(raw, ";")
	if !ok || (shape != "tree" && shape != "leftover") {
		fmt.Fprintf(os.Stderr, "r17 command: %s=%q: want LOG;tree or LOG;leftover\n", envCommand, raw)
		os.Exit(2)
	}
	signal.Ignore(syscall.SIGTERM)
	role := "child"
	if os.Getenv(envRole) == "grandchild" {
		role = "grandchild"
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "r17 command:", err)
		os.Exit(2)
	}
	prefix := fmt.Sprintf(" %s %d %s ", role, os.Getpid(), token)
	write := func(kind byte) {
		line := append([]byte{kind}, prefix...)
		line = strconv.AppendInt(line, verify.Mono(), 10)
		if _, err := f.Write(append(line, '\n')); err != nil {
			os.Exit(2)
		}
	}
	write('S')
	if role == "grandchild" {
		for {
			write('B')
			time.Sleep(beatEvery)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "r17 command:", err)
		os.Exit(2)
	}
	gc := exec.Command(exe, "-test.run=^$")
	gc.Env = append(os.Environ(), envRole+"=grandchild")
	gc.Stdout, gc.Stderr = os.Stdout, os.Stderr
	if err := gc.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "r17 command: start the grandchild:", err)
		os.Exit(2)
	}
	end := time.Now().Add(300 * time.Millisecond)
	for shape == "tree" || time.Now().Before(end) {
		write('B')
		time.Sleep(beatEvery)
	}
	write('E')
	os.Exit(0)
}

// beat is one line of the commands' log.
type beat struct {
	Kind  byte
	Role  string
	Pid   int
	Token uint64
	T     int64
}

// readBeats parses the log at path (lines cut short by a kill are skipped).
func readBeats(path string) ([]beat, error) {
	f, err := os.Open(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, err
	}
	defer f.Close()
	var out []beat
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 5 || len(fs[0]) != 1 {
			continue
		}
		pid, err1 := strconv.Atoi(fs[2])
		tok, err2 := strconv.ParseUint(fs[3], 10, 64)
		t, err3 := strconv.ParseInt(fs[4], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		out = append(out, beat{Kind: fs[0][0], Role: fs[1], Pid: pid, Token: tok, T: t})
	}
	return out, sc.Err()
}
