package cli

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/stores"
	"github.com/leasehold/leasehold/testrig/proctest"
	"github.com/leasehold/leasehold/testrig/silent"
)

// TestOpenHelperProcess is not a test of its own: the tests below run this
// test binary as the leasehold command through it, so that they can send
// it signals and read what it prints to its standard error.
func TestOpenHelperProcess(t *testing.T) {
	if os.Getenv("LEASEHOLD_TEST_OPEN_HELPER") != "1" {
		t.Skip("runs only as the child of the store-opening tests")
	}
	args := os.Args
	for i, a := range args {
		if a == "--" {
			args = args[i+1:]
			break
		}
	}
	os.Exit(Main(context.Background(), args, os.Stdout, os.Stderr))
}

// leaseholdProcess returns the leasehold command with args, run by this
// test binary, its standard error in the returned buffer.
func leaseholdProcess(t *testing.T, args ...string) (*exec.Cmd, *proctest.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^TestOpenHelperProcess$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), "LEASEHOLD_TEST_OPEN_HELPER=1", stores.EnvStore+"=")
	var stderr proctest.Buffer
	cmd.Stdout, cmd.Stderr = &bytes.Buffer{}, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, &stderr
}

// exitCode waits up to a generous limit for cmd and returns its exit code.
func exitCode(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return cmd.ProcessState.ExitCode()
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("%v still running after 60s", cmd.Args)
		return -1
	}
}

// silentStores are store URLs on a server that accepts and never answers.
func silentStores(addr string) map[string]string {
	return map[string]string{
		"redis":     "redis://:sekrit-pass-1@" + addr + "/0",
		"postgres":  "postgres://u:sekrit-pass-1@" + addr + "/db?sslmode=disable",
		"http":      "http://" + addr + "/?token=sekrit-pass-1",
		"leasehold": "leasehold://" + addr + "?token=sekrit-pass-1",
	}
}

// TestOpenHangingStoreEndsOnSignal: a store that never answers holds the
// command only until SIGTERM or SIGINT, which end it with 143 or 130 and a
// line naming the store (without its secrets); the connect timeout is set
// far beyond the test so that only the signal can end it.
func TestOpenHangingStoreEndsOnSignal(t *testing.T) {
	srv := silent.Listen(t)
	for scheme, url := range silentStores(srv.Addr()) {
		for _, tc := range []struct {
			name string
			args []string
			sig  syscall.Signal
		}{
			{"status", []string{"status", "--store", url, "--connect-timeout", "10m"}, syscall.SIGTERM},
			{"run", []string{"--connect-timeout", "10m", "run", "--store", url, "job", "--", "true"}, syscall.SIGINT},
		} {
			t.Run(scheme+"/"+tc.name, func(t *testing.T) {
				before := srv.Accepted()
				cmd, stderr := leaseholdProcess(t, tc.args...)
				srv.WaitAccepted(t, before)
				if err := cmd.Process.Signal(tc.sig); err != nil {
					t.Fatal(err)
				}
				if code, want := exitCode(t, cmd), 128+int(tc.sig); code != want {
					t.Errorf("exit %d, want %d; stderr %q", code, want, stderr)
				}
				msg := stderr.String()
				if !strings.Contains(msg, "while opening "+scheme+"://") || strings.Contains(msg, "sekrit-pass-1") {
					t.Errorf("stderr %q: want one line naming the store being opened, without its password or token", msg)
				}
			})
		}
	}
}

// TestOpenHangingStoreTimesOut: without a signal the command gives up
// after --connect-timeout (or the URL's connect_timeout=, which wins) with
// exit 70 and exactly one line naming the store without its secrets.
func TestOpenHangingStoreTimesOut(t *testing.T) {
	srv := silent.Listen(t)
	for scheme, url := range silentStores(srv.Addr()) {
		sep := "?"
		if strings.Contains(url, "?") {
			sep = "&"
		}
		for _, tc := range []struct {
			args       []string
			want, flag string
		}{
			{[]string{"status", "--store", url, "--connect-timeout", "2s"}, "no answer within 2s", "--connect-timeout"},
			{[]string{"--connect-timeout", "10m", "status", "--store", url + sep + "connect_timeout=1s"}, "no answer within 1s", "connect_timeout="},
		} {
			t.Run(scheme+"/"+tc.flag, func(t *testing.T) {
				start := time.Now()
				cmd, stderr := leaseholdProcess(t, tc.args...)
				if code := exitCode(t, cmd); code != ExitInternal {
					t.Errorf("exit %d, want %d; stderr %q", code, ExitInternal, stderr)
				}
				if took := time.Since(start); took < time.Second {
					t.Errorf("gave up after %s, before the connect timeout", took)
				}
				msg := stderr.String()
				if strings.Count(msg, "\n") != 1 || !strings.Contains(msg, "open store "+scheme+"://") ||
					!strings.Contains(msg, tc.want) || !strings.Contains(msg, tc.flag) || strings.Contains(msg, "sekrit-pass-1") {
					t.Errorf("stderr %q: want one line naming the store (no secrets), %q and %q", msg, tc.want, tc.flag)
				}
			})
		}
	}
}

// TestOpenRefusedRedisOneLine: a Redis that refuses connections is one
// line on stderr, not go-redis's own log of every dial.
func TestOpenRefusedRedisOneLine(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd, stderr := leaseholdProcess(t, "status", "--store", "redis://"+addr+"/0")
	if code := exitCode(t, cmd); code != ExitInternal {
		t.Errorf("exit %d, want %d; stderr %q", code, ExitInternal, stderr)
	}
	if msg := stderr.String(); strings.Count(msg, "\n") != 1 || !strings.HasPrefix(msg, "leasehold: open store redis://"+addr) {
		t.Errorf("stderr %q: want one line from leasehold naming the store", msg)
	}
}

// TestBadStoreFromEnvironment: a bad $LEASEHOLD_STORE is reported as coming
// from the environment; --store still wins over it.
func TestBadStoreFromEnvironment(t *testing.T) {
	h := newHarness(t)
	t.Setenv(stores.EnvStore, "sqlite://var/x.db")
	r := h.run("status")
	if r.code != ExitUsage || !strings.Contains(r.stderr, "$"+stores.EnvStore+"=sqlite://var/x.db") ||
		!strings.Contains(r.stderr, "did you mean sqlite:///var/x.db?") {
		t.Errorf("bad $%s: exit %d, stderr %q; want %d naming the variable and a hint", stores.EnvStore, r.code, r.stderr, ExitUsage)
	}
	h.create()
	if r := h.run("status", "--store", h.url); r.code != ExitOK {
		t.Errorf("--store with a bad $%s: exit %d, stderr %q", stores.EnvStore, r.code, r.stderr)
	}
	r = h.run("status", "--store", "sqlite:rel.db")
	if r.code != ExitUsage || strings.Contains(r.stderr, stores.EnvStore) || !strings.Contains(r.stderr, "did you mean sqlite:./rel.db") {
		t.Errorf("bad --store: exit %d, stderr %q; want %d with a hint, not naming the variable", r.code, r.stderr, ExitUsage)
	}
}

// TestStoreErrorNamesSubcommandHelp (red team of issue 31, item 9, the
// wording): a store's usage error (a bad URL, from --store or from $LEASEHOLD_STORE)
// ends with the help of the subcommand the user ran, never another's
// (it was reported as "Run 'leasehold status --help'" after a "run").
func TestStoreErrorNamesSubcommandHelp(t *testing.T) {
	h := newHarness(t)
	for _, c := range []struct {
		cmd, rest []string
	}{
		{[]string{"run"}, []string{"a", "--", "true"}},
		{[]string{"hold"}, []string{"a"}},
		{[]string{"elect"}, []string{"a", "--", "true"}},
		{[]string{"store", "init"}, nil},
		{[]string{"status"}, nil},
	} {
		want := "Run 'leasehold " + strings.Join(c.cmd, " ") + " --help' for usage.\n"
		t.Setenv(stores.EnvStore, "sqlite://var/x.db")
		args := append(append([]string{}, c.cmd...), c.rest...)
		if r := h.run(args...); r.code != ExitUsage || !strings.Contains(r.stderr, "did you mean sqlite:///var/x.db?") || !strings.HasSuffix(r.stderr, want) {
			t.Errorf("%q with a bad $%s: exit %d, stderr %q; want %d ending %q", args, stores.EnvStore, r.code, r.stderr, ExitUsage, want)
		}
		t.Setenv(stores.EnvStore, "")
		args = append(append(append([]string{}, c.cmd...), "--store", "postgres://127.0.0.1:1/db?holdbak=5s"), c.rest...)
		if r := h.run(args...); r.code != ExitUsage || !strings.Contains(r.stderr, "did you mean holdback=?") || !strings.HasSuffix(r.stderr, want) {
			t.Errorf("%q: exit %d, stderr %q; want %d ending %q", args, r.code, r.stderr, ExitUsage, want)
		}
	}
}

// TestConnectTimeoutFlag: --connect-timeout is global, documented, and a
// value that is not a positive duration is a usage error before anything
// is opened.
func TestConnectTimeoutFlag(t *testing.T) {
	h := newHarness(t)
	for _, args := range [][]string{
		{"--connect-timeout", "0", "status", "--store", h.url},
		{"status", "--connect-timeout", "-1s", "--store", h.url},
		{"status", "--connect-timeout=soon", "--store", h.url},
	} {
		if r := h.run(args...); r.code != ExitUsage || !strings.Contains(r.stderr, "connect-timeout") {
			t.Errorf("%v: exit %d, stderr %q; want %d naming the flag", args, r.code, r.stderr, ExitUsage)
		}
	}
	if _, err := os.Stat(h.path); err == nil {
		t.Error("a usage error opened the store")
	}
	h.create()
	if r := h.run("status", "--connect-timeout", "3s", "--store", h.url); r.code != ExitOK {
		t.Errorf("--connect-timeout 3s: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := h.run("status", "--help"); !strings.Contains(r.stdout, "--connect-timeout duration") || !strings.Contains(r.stdout, "(default 10s)") {
		t.Errorf("status --help does not show --connect-timeout and its default:\n%s", r.stdout)
	}
	if r := h.run("--help"); !strings.Contains(r.stdout, "sqlite:./leases.db") || !strings.Contains(r.stdout, "connect_timeout=") {
		t.Errorf("leasehold --help shows neither the relative sqlite: form nor connect_timeout=:\n%s", r.stdout)
	}
}

// TestStoreInitHangingStore: "store init" is ended by a signal, and by an
// explicit --connect-timeout, like opening a store.
func TestStoreInitHangingStore(t *testing.T) {
	srv := silent.Listen(t)
	url := "postgres://u:sekrit-pass-1@" + srv.Addr() + "/db?sslmode=disable"
	before := srv.Accepted()
	cmd, stderr := leaseholdProcess(t, "store", "init", "--store", url)
	srv.WaitAccepted(t, before)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, cmd); code != 143 || !strings.Contains(stderr.String(), "while initialising postgres://") {
		t.Errorf("SIGTERM: exit %d, stderr %q; want 143 and a line naming the store", code, stderr)
	}
	cmd, stderr = leaseholdProcess(t, "store", "init", "--connect-timeout", "1s", "--store", url)
	if code := exitCode(t, cmd); code != ExitInternal {
		t.Errorf("--connect-timeout 1s: exit %d, stderr %q; want %d", code, stderr, ExitInternal)
	}
	if msg := stderr.String(); !strings.Contains(msg, "store init postgres://") || !strings.Contains(msg, "no answer within 1s") || strings.Contains(msg, "sekrit-pass-1") {
		t.Errorf("--connect-timeout 1s: stderr %q; want the store (no secrets) and no answer within 1s", msg)
	}
}
