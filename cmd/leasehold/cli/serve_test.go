//go:build unix

package cli

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/remote"
	"github.com/leasehold/leasehold/server"
	"github.com/leasehold/leasehold/stores"
	"github.com/leasehold/leasehold/testrig/proctest"
)

// serving is a "leasehold serve" running in-process.
type serving struct {
	out, errb *proctest.Buffer
	done      chan result
	base      string // http://host:port
	resp      string
}

var listenRE = regexp.MustCompile(`HTTP API on (https?://[^/\s]+)/v1/`)
var respRE = regexp.MustCompile(`RESP on (\S+)`)

func startServing(t *testing.T, args ...string) *serving {
	t.Helper()
	s := &serving{out: &proctest.Buffer{}, errb: &proctest.Buffer{}, done: make(chan result, 1)}
	e := &env{stdout: s.out, stderr: s.errb, open: stores.Open}
	go func() {
		code := e.main(context.Background(), append([]string{"serve"}, args...))
		s.done <- result{code, s.out.String(), s.errb.String()}
	}()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if m := listenRE.FindStringSubmatch(s.out.String()); m != nil {
			s.base = m[1]
			if m := respRE.FindStringSubmatch(s.out.String()); m != nil {
				s.resp = m[1]
			}
			return s
		}
		select {
		case r := <-s.done:
			t.Fatalf("serve exited %d before listening:\n%s\n%s", r.code, r.stdout, r.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not print its address within 60s:\n%s\n%s", s.out.String(), s.errb.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// catchSIGTERM keeps the SIGTERM that stops a serve in these tests from
// ending the test binary, until the test ends.
func catchSIGTERM(t *testing.T) {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM)
	t.Cleanup(func() { signal.Stop(sigs) })
}

// sigterm stops the serves running in this test process as an operator
// would: the signal goes to the whole process.
func sigterm(t *testing.T) {
	t.Helper()
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
}

// stop ends s (and every other serve running) and gives its result.
func (s *serving) stop(t *testing.T) result {
	t.Helper()
	sigterm(t)
	return s.wait(t)
}

// stopAll stops the serves with one SIGTERM; each must exit 0.
func stopAll(t *testing.T, serves ...*serving) {
	t.Helper()
	sigterm(t)
	for _, s := range serves {
		if r := s.wait(t); r.code != 0 {
			t.Fatalf("exit %d\n%s", r.code, r.stderr)
		}
	}
}

func (s *serving) wait(t *testing.T) result {
	t.Helper()
	select {
	case r := <-s.done:
		return r
	case <-time.After(60 * time.Second):
		t.Fatalf("serve did not stop within 60s:\n%s\n%s", s.out.String(), s.errb.String())
		return result{}
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestServeStartsAndStopsOnSIGTERM: serve answers /healthz, shuts down
// cleanly on SIGTERM (exit 0), and its engine keeps a held lease across
// the restart.
func TestServeStartsAndStopsOnSIGTERM(t *testing.T) {
	// Catch SIGTERM in the test too, so that a signal sent before serve
	// has registered its handler cannot kill the test binary.
	catchSIGTERM(t)

	dir := filepath.Join(t.TempDir(), "data")
	args := []string{"--addr", "127.0.0.1:0", "--resp-addr", "127.0.0.1:0", "--data-dir", dir, "--log-level", "warn"}
	s := startServing(t, args...)
	if code, body := get(t, s.base+"/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("healthz: %d %q", code, body)
	}
	if code, _ := get(t, s.base+"/readyz"); code != 200 {
		t.Fatalf("readyz: %d", code)
	}
	if code, body := get(t, s.base+"/metrics"); code != 200 || !strings.Contains(body, "leasehold_held_leases") {
		t.Errorf("metrics: %d", code)
	}
	if code, _ := get(t, s.base+"/dashboard/"); code != 200 {
		t.Errorf("dashboard: %d", code)
	}
	if s.resp == "" {
		t.Errorf("no RESP address printed:\n%s", s.out.String())
	}
	st, err := remote.OpenHTTP(s.base)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	rec, err := st.TryAcquire(ctx, leasehold.AcquireRequest{Name: "svc/x", Owner: "a", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}

	r := s.stop(t)
	if r.code != 0 || !strings.Contains(r.stdout, "leasehold: stopped") {
		t.Fatalf("serve after SIGTERM: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "engine in "+dir) || !strings.Contains(r.stdout, "auth is off") {
		t.Errorf("startup lines:\n%s", r.stdout)
	}

	// Restart on the same data: the lease is still held, with its token.
	s = startServing(t, args...)
	st2, err := remote.OpenHTTP(s.base)
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	got, err := st2.Get(ctx, "svc/x")
	if err != nil || got.Owner != "a" || got.Token != rec.Token {
		t.Errorf("after restart: %+v, %v; want a's lease, token %d", got, err, rec.Token)
	}
	if r := s.stop(t); r.code != 0 {
		t.Fatalf("second serve: exit %d\n%s", r.code, r.stderr)
	}
}

// TestServeProxyAndEnv: --store serves a proxy; flags fall back to
// LEASEHOLD_* variables, and the command line wins over them.
func TestServeProxyAndEnv(t *testing.T) {
	catchSIGTERM(t)

	authFile := filepath.Join(t.TempDir(), "tokens.json")
	if err := os.WriteFile(authFile, []byte(`{"tokens":[{"identity":"ci","token":"s3cret","grants":[{"prefix":"ci/","access":"write"}]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("LEASEHOLD_SERVE_STORE", "memory://")
	t.Setenv("LEASEHOLD_AUTH_FILE", authFile)
	t.Setenv("LEASEHOLD_RESP_ADDR", "")
	t.Setenv("LEASEHOLD_ADDR", "256.0.0.1:1") // overridden by --addr
	t.Setenv("LEASEHOLD_LOG_FORMAT", "json")
	s := startServing(t, "--addr", "127.0.0.1:0")
	if s.resp != "" {
		t.Errorf("RESP listening although $LEASEHOLD_RESP_ADDR is empty: %s", s.out.String())
	}
	if !strings.Contains(s.out.String(), "proxy in front of memory://") {
		t.Errorf("startup lines:\n%s", s.out.String())
	}
	ctx := context.Background()
	anon, _ := remote.OpenHTTP(s.base)
	defer anon.Close()
	if _, err := anon.List(ctx, ""); err == nil {
		t.Error("auth file from the environment not applied")
	}
	ci, _ := remote.OpenHTTP(s.base + "?token=s3cret")
	defer ci.Close()
	if _, err := ci.TryAcquire(ctx, leasehold.AcquireRequest{Name: "ci/build", Owner: "a", TTL: time.Minute}); err != nil {
		t.Errorf("acquire with the token: %v", err)
	}
	stopAll(t, s)
}

func TestServeUsageErrors(t *testing.T) {
	h := newHarness(t)
	dir := t.TempDir()
	for _, args := range [][]string{
		{"serve", "extra"},
		{"serve", "--log-format", "xml", "--data-dir", dir},
		{"serve", "--log-level", "loud", "--data-dir", dir},
		{"serve", "--addr", "", "--resp-addr", "", "--data-dir", dir},
		{"serve", "--auth-file", filepath.Join(dir, "missing.json"), "--data-dir", dir},
		{"serve", "--rate-limit", "-1", "--data-dir", dir},
		{"serve", "--store", "memory://", "--data-dir", dir},
		{"serve", "--store", "nope://x"},
		{"serve", "--addr", "127.0.0.1:0", "--resp-addr", "", "--data-dir", dir, "--tls-cert", filepath.Join(dir, "c.pem")},
		{"serve", "--data-dir", dir, "--resp-max-conns", "0"},
		{"serve", "--data-dir", dir, "--resp-max-conns-per-addr", "-1"},
		{"serve", "--data-dir", dir, "--resp-auth-timeout", "0s"},
		{"serve", "--data-dir", dir, "--resp-command-timeout", "0s"},
		{"serve", "--data-dir", dir, "--resp-tls-handshake-timeout", "-1s"},
		{"serve", "--data-dir", dir, "--resp-max-output-bytes", "0"},
		{"serve", "--data-dir", dir, "--resp-max-command-bytes", "0"},
		{"serve", "--data-dir", dir, "--resp-max-total-input-bytes", "0"},
		{"serve", "--data-dir", dir, "--resp-max-total-input-bytes", "-1"},
		{"serve", "--data-dir", dir, "--resp-max-total-output-bytes", "0"},
		{"serve", "--data-dir", dir, "--resp-max-list", "0"},
		{"serve", "--data-dir", dir, "--max-body-bytes", "-1"},
		{"serve", "--data-dir", dir, "--body-timeout", "0s"},
		{"serve", "--data-dir", dir, "--write-timeout", "0s"},
		{"serve", "--data-dir", dir, "--quota-leases", "-1"},
		{"serve", "--data-dir", dir, "--max-tombstone-bytes", "0"},
		{"serve", "--data-dir", dir, "--max-tombstone-bytes", "100"},
		{"serve", "--data-dir", dir, "--max-record-bytes", "-1"},
		{"serve", "--data-dir", dir, "--quota-data-bytes", "-5"},
		{"serve", "--data-dir", dir, "--quota-sessions", "-1"},
		{"serve", "--data-dir", dir, "--quota-waiters", "-1"},
		{"serve", "--data-dir", dir, "--http-max-conns", "0"},
		{"serve", "--data-dir", dir, "--http-max-conns-per-addr", "-5"},
		{"serve", "--data-dir", dir, "--allowed-hosts", "http://leases.internal"},
		{"serve", "--data-dir", dir, "--allowed-hosts", "leases.internal:7070"},
		{"serve", "--data-dir", dir, "--allowed-hosts", "a,,b"},
	} {
		if r := h.run(args...); r.code != ExitUsage {
			t.Errorf("leasehold %q: exit %d, want %d\n%s", args, r.code, ExitUsage, r.stderr)
		}
	}
	t.Setenv("LEASEHOLD_RESP_MAX_TOTAL_INPUT_BYTES", "0")
	if r := h.run("serve", "--data-dir", dir); r.code != ExitUsage || !strings.Contains(r.stderr, "--resp-max-total-input-bytes") {
		t.Errorf("$LEASEHOLD_RESP_MAX_TOTAL_INPUT_BYTES=0: exit %d %s", r.code, r.stderr)
	}
	os.Unsetenv("LEASEHOLD_RESP_MAX_TOTAL_INPUT_BYTES") // t.Setenv restores it after the test
	t.Setenv("LEASEHOLD_RATE_LIMIT", "lots")
	if r := h.run("serve", "--data-dir", dir); r.code != ExitUsage || !strings.Contains(r.stderr, "LEASEHOLD_RATE_LIMIT") {
		t.Errorf("bad env value: exit %d %s", r.code, r.stderr)
	}
}

func TestServeHelp(t *testing.T) {
	h := newHarness(t)
	r := h.run("serve", "--help")
	for _, want := range []string{"--addr", "--resp-addr", "--data-dir", "--store", "--no-sync", "UNSAFE",
		"--auth-file", "--rate-limit", "--rate-burst", "--tls-cert", "--tls-key", "--client-ca",
		"--log-level", "--log-format", "LEASEHOLD_SERVE_STORE", "SIGTERM", "Examples:",
		"--holder-key-file", "Holder proofs", "holder.key", "share one key file"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("serve --help lacks %q", want)
		}
	}
}

// TestServeRedactsStoreURL: the token or password of a store URL shows
// nowhere: not in the start-up line of a proxy, not in the error of a
// store that cannot be opened.
func TestServeRedactsStoreURL(t *testing.T) {
	catchSIGTERM(t)
	const secret = "url-s3cret-token"
	authFile := filepath.Join(t.TempDir(), "tokens.json")
	if err := os.WriteFile(authFile, []byte(`{"tokens":[{"identity":"px","token":"`+secret+`","grants":[{"prefix":"","access":"admin"}]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	inner := startServing(t, "--addr", "127.0.0.1:0", "--resp-addr", "127.0.0.1:0", "--store", "memory://", "--auth-file", authFile)
	proxy := startServing(t, "--addr", "127.0.0.1:0", "--resp-addr", "", "--store", "leasehold://"+inner.resp+"?token="+secret)
	if out := proxy.out.String(); !strings.Contains(out, "proxy in front of leasehold://"+inner.resp+"?token=REDACTED") || strings.Contains(out+proxy.errb.String(), secret) {
		t.Errorf("start-up lines:\n%s\n%s", out, proxy.errb.String())
	}
	stopAll(t, inner, proxy)

	h := newHarness(t)
	for _, u := range []string{
		"leasehold://127.0.0.1:1?token=" + secret,
		"postgres://app:" + secret + "@127.0.0.1:1/db?sslmode=disable&connect_timeout=5",
		"leasehold://127.0.0.1:1?token=" + secret + "&bogus=%zz",
	} {
		r := h.run("serve", "--addr", "127.0.0.1:0", "--resp-addr", "", "--store", u)
		if r.code == 0 || strings.Contains(r.stdout+r.stderr, secret) {
			t.Errorf("serve --store %q: exit %d\n%s\n%s", u, r.code, r.stdout, r.stderr)
		}
	}
}

// --resp-max-list and --max-body-bytes reach the server: a third lease
// makes LH.LIST answer TOOMANY, and a body over the limit gets 413.
func TestServeListAndBodyFlags(t *testing.T) {
	catchSIGTERM(t)
	s := startServing(t, "--store", "memory://", "--addr", "127.0.0.1:0", "--resp-addr", "127.0.0.1:0",
		"--resp-max-list", "2", "--max-body-bytes", "300")
	defer stopAll(t, s)
	ctx := context.Background()
	c, _ := remote.OpenHTTP(s.base)
	defer c.Close()
	for _, n := range []string{"l/a", "l/b", "l/c"} {
		if _, err := c.TryAcquire(ctx, leasehold.AcquireRequest{Name: n, Owner: "o", TTL: time.Minute}); err != nil {
			t.Fatalf("acquire %s: %v", n, err)
		}
	}
	conn, err := net.DialTimeout("tcp", s.resp, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := conn.Write([]byte("*2\r\n$7\r\nLH.LIST\r\n$2\r\nl/\r\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "-TOOMANY") {
		t.Errorf("LH.LIST of 3 leases with --resp-max-list 2: %q, %v; want -TOOMANY", line, err)
	}
	body := `{"owner":"o","ttl_ms":60000,"data":"` + strings.Repeat("x", 400) + `"}`
	resp, err := http.Post(s.base+"/v1/leases/l/d/acquire", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a %d-byte body with --max-body-bytes 300: %d, want 413", len(body), resp.StatusCode)
	}
}

// TestServeQuotaFlags: --quota-leases reaches the server (a second lease
// of one client is refused with quota-exceeded, over both ports) and 0
// turns the quota off.
func TestServeQuotaFlags(t *testing.T) {
	catchSIGTERM(t)
	ctx := context.Background()
	acquire := func(base, name string) error {
		c, err := remote.OpenHTTP(base)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, err = c.TryAcquire(ctx, leasehold.AcquireRequest{Name: name, Owner: "o", TTL: time.Minute})
		return err
	}
	s := startServing(t, "--store", "memory://", "--addr", "127.0.0.1:0", "--resp-addr", "127.0.0.1:0", "--quota-leases", "1")
	defer stopAll(t, s)
	if err := acquire(s.base, "q/a"); err != nil {
		t.Fatalf("the first lease: %v", err)
	}
	if err := acquire(s.base, "q/b"); !errors.Is(err, remote.ErrQuotaExceeded) {
		t.Errorf("a second lease with --quota-leases 1: %v, want ErrQuotaExceeded", err)
	}
	r, err := remote.OpenRESP("leasehold://" + s.resp)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.TryAcquire(ctx, leasehold.AcquireRequest{Name: "q/c", Owner: "o", TTL: time.Minute}); !errors.Is(err, remote.ErrQuotaExceeded) {
		t.Errorf("a second lease over RESP with --quota-leases 1: %v, want ErrQuotaExceeded", err)
	}
	off := startServing(t, "--store", "memory://", "--addr", "127.0.0.1:0", "--quota-leases", "0", "--quota-sessions", "0")
	defer stopAll(t, off)
	for _, n := range []string{"o/a", "o/b", "o/c"} {
		if err := acquire(off.base, n); err != nil {
			t.Errorf("%s with --quota-leases 0 (no limit): %v", n, err)
		}
	}
	// 0 is no limit, not the default: one client opens more sessions
	// than the default quota (1,000). Before the fix the 1,001st got 429
	// quota-exceeded (the server turned 0 back into the default).
	for i := range server.DefaultQuotaSessions + 1 {
		resp, err := http.Post(off.base+"/v1/sessions", "application/json", strings.NewReader(`{"ttl_ms":60000}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("session %d with --quota-sessions 0 (no limit): %s %s", i+1, resp.Status, body)
		}
	}
}

// TestServeNegativeQuota: a negative --quota-* is a usage error naming
// the flag, and nothing is started or created (the data dir stays absent).
func TestServeNegativeQuota(t *testing.T) {
	h := newHarness(t)
	for _, flag := range []string{"--quota-leases", "--quota-data-bytes", "--quota-sessions", "--quota-waiters"} {
		dir := filepath.Join(t.TempDir(), "data")
		r := h.run("serve", "--data-dir", dir, "--addr", "127.0.0.1:0", "--resp-addr", "", flag, "-1")
		if r.code != ExitUsage || !strings.Contains(r.stderr, flag+" must be 0 (no limit) or positive") {
			t.Errorf("%s -1: exit %d, want %d naming the flag\n%s", flag, r.code, ExitUsage, r.stderr)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s -1 created the data dir (%v)", flag, err)
		}
	}
}
