//go:build unix

package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	lh "github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/sqlite"
	"github.com/leasehold/leasehold/testrig/proctest"
)

// unitDir holds the systemd units of packaging/systemd.
const unitDir = "../../packaging/systemd"

var unitFiles = []string{"leasehold.service", "leasehold-example-backup.service", "leasehold-example-backup.timer"}

// The programs the units name, replaced in the tests by the test's own.
const (
	unitBinary = "/usr/bin/leasehold"
	unitJob    = "/usr/local/bin/backup.sh"
)

// TestSystemdUnitsVerify runs systemd-analyze verify on the units, with
// /usr/bin/leasehold and the example's backup script replaced by programs
// that exist here, and the pages of docs/man on MANPATH for their
// Documentation= lines: it must report nothing (systemd-analyze warns
// about unknown keys and bad values on stderr and still exits 0).
func TestSystemdUnitsVerify(t *testing.T) {
	sa := tool(t, "systemd-analyze")
	dir := t.TempDir()
	for _, f := range unitFiles {
		b, err := os.ReadFile(filepath.Join(unitDir, f))
		if err != nil {
			t.Fatal(err)
		}
		s := strings.ReplaceAll(string(b), unitBinary, bin)
		s = strings.ReplaceAll(s, unitJob, "/bin/true")
		if err := os.WriteFile(filepath.Join(dir, f), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	man1 := filepath.Join(dir, "man", "man1")
	if err := os.MkdirAll(man1, 0o755); err != nil {
		t.Fatal(err)
	}
	pages, err := filepath.Glob("../../docs/man/*.1")
	if err != nil || len(pages) == 0 {
		t.Fatalf("no pages in docs/man: %v", err)
	}
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(man1, filepath.Base(p)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := []string{"verify"}
	for _, f := range unitFiles {
		args = append(args, "./"+f)
	}
	cmd := exec.CommandContext(ctx, sa, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "MANPATH="+filepath.Join(dir, "man"), "SYSTEMD_LOG_COLOR=0")
	out, err := cmd.CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// unit is what the tests read of a unit file: its [Service] settings, in
// order, each key with every value it was given.
type unit map[string][]string

func readUnit(t *testing.T, name string) unit {
	t.Helper()
	f, err := os.Open(filepath.Join(unitDir, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unit{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
		case strings.HasPrefix(l, "["):
			section = l
		case section == "[Service]":
			k, v, _ := strings.Cut(l, "=")
			u[k] = append(u[k], v)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return u
}

// env returns the unit's Environment= settings with %S (the state
// directories' root) as stateRoot.
func (u unit) env(stateRoot string) []string {
	var kv []string
	for _, v := range u["Environment"] {
		kv = append(kv, strings.ReplaceAll(v, "%S", stateRoot))
	}
	return kv
}

// execArgs returns ExecStart's arguments after the program, which must be
// /usr/bin/leasehold.
func (u unit) execArgs(t *testing.T) []string {
	t.Helper()
	if len(u["ExecStart"]) != 1 {
		t.Fatalf("ExecStart: %q", u["ExecStart"])
	}
	f := strings.Fields(u["ExecStart"][0])
	if f[0] != unitBinary {
		t.Fatalf("ExecStart runs %s, not %s", f[0], unitBinary)
	}
	return f[1:]
}

// TestSystemdServeUnit runs the serve unit's command as systemd would (its
// environment, no HOME; the addresses from what would be
// /etc/default/leasehold), stops it with the unit's KillSignal and checks
// that it kept its state in the StateDirectory (%S/leasehold/server, with
// the holder key) and stopped cleanly (0) well within TimeoutStopSec.
func TestSystemdServeUnit(t *testing.T) {
	u := readUnit(t, "leasehold.service")
	if got := u["StateDirectory"]; len(got) != 1 || got[0] != "leasehold" {
		t.Fatalf("StateDirectory %q", got)
	}
	if got := u["KillSignal"]; len(got) != 1 || got[0] != "SIGTERM" {
		t.Fatalf("KillSignal %q: serve stops gracefully on SIGTERM", got)
	}
	stopTimeout, err := time.ParseDuration(u["TimeoutStopSec"][0])
	if err != nil {
		t.Fatal(err)
	}
	stateRoot := t.TempDir()
	addr := proctest.FreeAddr(t)
	cmd := exec.Command(bin, u.execArgs(t)...)
	for _, kv := range os.Environ() {
		if (!strings.HasPrefix(kv, "LEASEHOLD_") || strings.HasPrefix(kv, "LEASEHOLD_PROC_MARKS=")) && !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "XDG_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, u.env(stateRoot)...)
	cmd.Env = append(cmd.Env, "LEASEHOLD_ADDR="+addr, "LEASEHOLD_RESP_ADDR=", "LEASEHOLD_LOG_LEVEL=warn")
	var out proctest.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = waitDelay
	startGroup(t, cmd)
	proctest.WaitReady(t, "http://"+addr+"/readyz", 30*time.Second)

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve after SIGTERM: %v\n%s", err, out.String())
		}
	case <-time.After(stopTimeout):
		t.Fatalf("serve still running %v (TimeoutStopSec) after SIGTERM\n%s", stopTimeout, out.String())
	}
	data := filepath.Join(stateRoot, "leasehold", "server")
	if _, err := os.Stat(filepath.Join(data, "holder.key")); err != nil {
		t.Errorf("no holder key in the state directory: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), data) {
		t.Errorf("serve did not say it keeps its state in %s:\n%s", data, out.String())
	}
}

// TestSystemdExampleJobUnit runs the example job's command (its store and
// script replaced): it runs the script when the lease is free, and when
// another holds it skips the script and still exits 0 (the unit
// succeeds).
func TestSystemdExampleJobUnit(t *testing.T) {
	u := readUnit(t, "leasehold-example-backup.service")
	args := u.execArgs(t)
	dash := -1
	for i, a := range args {
		if a == "--" {
			dash = i
			break
		}
	}
	if dash < 1 || args[0] != "run" || dash+1 >= len(args) || args[dash+1] != unitJob {
		t.Fatalf("ExecStart is not leasehold run ... NAME -- %s: %q", unitJob, args)
	}
	name := args[dash-1]
	store, path := newStore(t)
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	job := filepath.Join(dir, "backup.sh")
	if err := os.WriteFile(job, []byte("#!/bin/sh\necho \"$LEASEHOLD_TOKEN\" >> "+marker+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	args[dash+1] = job
	runJob := func() (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := leasehold(ctx, args...)
		for _, kv := range u.env(dir) {
			if !strings.HasPrefix(kv, "LEASEHOLD_STORE=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, "LEASEHOLD_STORE="+store)
		out, err := cmd.CombinedOutput()
		return exitCode(err), string(out)
	}
	if code, out := runJob(); code != 0 {
		t.Fatalf("job with the lease free: exit %d\n%s", code, out)
	}
	if b, err := os.ReadFile(marker); err != nil || strings.TrimSpace(string(b)) == "" {
		t.Fatalf("the script did not run: %v %q", err, b)
	}

	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.TryAcquire(context.Background(), lh.AcquireRequest{Name: name, Owner: "other-host", TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if code, out := runJob(); code != 0 {
		t.Fatalf("job with the lease held by another: exit %d, want 0 (skipped)\n%s", code, out)
	}
	if b, _ := os.ReadFile(marker); strings.Count(string(b), "\n") != 1 {
		t.Fatalf("the script ran while another held the lease: %q", b)
	}
}
