package abuse

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/testrig/proctest"
	"github.com/leasehold/leasehold/testrig/verify"
	"github.com/leasehold/leasehold/wire/resp"
)

// TestMain lets this test binary also be `leasehold` (serveProc runs it as
// `leasehold serve`, a process whose RSS and fds the cases measure).
func TestMain(m *testing.M) {
	verify.MaybeWorker()
	os.Exit(m.Run())
}

// serveProc is `leasehold serve` in a process of its own (engine in a
// temporary directory), with auth on (the tokens of newAuth) or off.
type serveProc struct {
	*testServer
	cmd  *exec.Cmd
	resp string // the RESP address
}

func startServeProc(t *testing.T, auth bool, extra ...string) *serveProc {
	t.Helper()
	dir := t.TempDir()
	httpAddr, respAddr := freeAddr(t), freeAddr(t)
	args := []string{"serve", "--addr", httpAddr, "--resp-addr", respAddr, "--log-level", "error",
		"--data-dir", filepath.Join(dir, "data"), "--dashboard=false"}
	if auth {
		args = append(args, "--auth-file", authFile(t,
			grant{"admin", adminToken, "", "admin"},
			grant{"tenant", tenantToken, "tenant-a/", "write"},
			grant{"polite", politeToken, politePrefix, "write"}))
	}
	args = append(args, extra...)
	cmd, err := verify.CLICommand(context.Background(), args...)
	if bin := os.Getenv(envServeBin); bin != "" {
		cmd, err = exec.Command(bin, knownFlags(t, bin, args)...), nil
		cmd.Stderr = os.Stderr
	}
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	p := &serveProc{
		testServer: &testServer{t: t, addr: httpAddr, url: "http://" + httpAddr, client: newClient(), maxBody: 128 << 10},
		cmd:        cmd, resp: respAddr,
	}
	t.Cleanup(p.client.CloseIdleConnections)
	proctest.WaitReady(t, p.url+"/readyz", 60*time.Second)
	return p
}

// envServeBin, when set, names a leasehold binary that startServeProc
// runs as `leasehold serve` instead of this test binary: a test-only
// override to show a case failing on an older build (a worktree of the
// commit before a fix, built with go build ./cmd/leasehold). The flags such
// a binary does not know are left out (knownFlags) and logged.
const envServeBin = "LEASEHOLD_R11_SERVE_BIN"

// knownFlags is args without the flags (--name value or --name=value) that
// bin's `serve --help` does not list.
func knownFlags(t *testing.T, bin string, args []string) []string {
	t.Helper()
	help, _ := exec.Command(bin, "serve", "--help").CombinedOutput()
	var kept, dropped []string
	for i := 0; i < len(args); i++ {
		name, hasValue := strings.CutPrefix(args[i], "--")
		if !hasValue {
			kept = append(kept, args[i])
			continue
		}
		name, _, inline := strings.Cut(name, "=")
		n := 1
		if !inline && i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
			n = 2
		}
		if regexp.MustCompile(`--` + regexp.QuoteMeta(name) + `(\s|$)`).Match(help) {
			kept = append(kept, args[i:i+n]...)
		} else {
			dropped = append(dropped, args[i:i+n]...)
		}
		i += n - 1
	}
	if len(dropped) > 0 {
		t.Logf("%s=%s does not know %v: left out", envServeBin, bin, dropped)
	}
	return kept
}

// grant is a token of an auth file (--auth-file) with its one grant.
type grant struct{ identity, token, prefix, access string }

// authFile writes an auth file with these tokens in a temporary directory
// and returns its path.
func authFile(t *testing.T, grants ...grant) string {
	t.Helper()
	type grantJSON struct {
		Prefix string `json:"prefix"`
		Access string `json:"access"`
	}
	type tokenJSON struct {
		Identity string      `json:"identity"`
		Token    string      `json:"token"`
		Grants   []grantJSON `json:"grants"`
	}
	var f struct {
		Tokens []tokenJSON `json:"tokens"`
	}
	for _, g := range grants {
		f.Tokens = append(f.Tokens, tokenJSON{Identity: g.identity, Token: g.token, Grants: []grantJSON{{Prefix: g.prefix, Access: g.access}}})
	}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "tokens.json")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// freeAddr is proctest.FreeAddr.
func freeAddr(t *testing.T) string {
	t.Helper()
	return proctest.FreeAddr(t)
}

// rss is the server process's resident set (VmRSS), in bytes.
func (p *serveProc) rss() int64 {
	p.t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		p.t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				p.t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	p.t.Fatal("no VmRSS")
	return 0
}

// fds counts the server process's open file descriptors.
func (p *serveProc) fds() int {
	p.t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.cmd.Process.Pid))
	if err != nil {
		p.t.Fatal(err)
	}
	return len(ents)
}

// metric reads one sample of /metrics (with the admin token), e.g.
// `leasehold_resp_connections_closed_total{reason="http_request"}`; a
// missing sample is 0.
func (p *serveProc) metric(sample string) float64 {
	p.t.Helper()
	res, err := p.do(p.client, request{method: "GET", path: "/metrics", auth: bearer(adminToken)})
	if err != nil || res.status != 200 {
		p.t.Fatalf("GET /metrics: %d %v", res.status, err)
	}
	for _, line := range strings.Split(string(res.body), "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

const mib = 1 << 20

// --- a RESP client ---

// respClient is one RESP connection used a command at a time.
type respClient struct {
	nc  net.Conn
	rd  *resp.Reader
	buf []byte
}

// dialRESP connects from the loopback address src (each address is a
// client of its own for the per-address cap) and authenticates with token
// if it is not empty.
func dialRESP(addr, src, token string) (*respClient, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 30 * time.Second}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &respClient{nc: nc, rd: resp.NewReader(bufio.NewReaderSize(nc, 32<<10))}
	if token != "" {
		v, err := c.do("AUTH", token)
		if err != nil || v.Type != resp.SimpleString {
			nc.Close()
			return nil, fmt.Errorf("AUTH: %s %v", v.Str, err)
		}
	}
	return c, nil
}

func (c *respClient) do(args ...string) (resp.Value, error) {
	c.nc.SetDeadline(time.Now().Add(60 * time.Second))
	c.buf = resp.AppendCommand(c.buf[:0], args...)
	if _, err := c.nc.Write(c.buf); err != nil {
		return resp.Value{}, err
	}
	return c.rd.ReadValue()
}

// respPolite acquires and releases polite/r over RESP, timing each
// command.
type respPolite struct {
	c     *respClient
	lat   []time.Duration
	wrong []string
}

func newRESPPolite(t *testing.T, addr, src, token string) *respPolite {
	t.Helper()
	c, err := dialRESP(addr, src, token)
	if err != nil {
		t.Fatalf("polite RESP client: %v", err)
	}
	t.Cleanup(func() { c.nc.Close() })
	return &respPolite{c: c}
}

func (p *respPolite) call(ok func(resp.Value) bool, args ...string) (resp.Value, bool) {
	start := time.Now()
	v, err := p.c.do(args...)
	if err != nil || !ok(v) {
		p.wrong = append(p.wrong, fmt.Sprintf("%s: %c%s %v", args[0], v.Type, v.Str, err))
		return v, false
	}
	p.lat = append(p.lat, time.Since(start))
	return v, true
}

// cycle acquires and releases once.
func (p *respPolite) cycle() {
	v, ok := p.call(func(v resp.Value) bool { return v.Type == resp.Array && len(v.Array) > 0 },
		"LH.ACQUIRE", politePrefix+"r", "polite", "60000")
	if !ok {
		return
	}
	release := []string{"LH.RELEASE", politePrefix + "r", "polite", strconv.FormatInt(v.Array[0].Int, 10)}
	if len(v.Array) == resp.GrantLen+1 { // the grant's secret (holder proofs)
		release = append(release, "SECRET", string(v.Array[5].Str))
	}
	p.call(func(v resp.Value) bool { return v.Type == resp.SimpleString }, release...)
}

// run cycles until stop is closed, then reports what it saw on done.
func (p *respPolite) run(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	for {
		select {
		case <-stop:
			return
		default:
		}
		p.cycle()
	}
}

func (p *respPolite) take() (lat []time.Duration, wrong []string) {
	lat, wrong = p.lat, p.wrong
	p.lat, p.wrong = nil, nil
	return lat, wrong
}

// baselineRESP measures the polite RESP client alone.
func (p *respPolite) baseline(t *testing.T, cycles int) (time.Duration, int) {
	t.Helper()
	for i := 0; i < 10; i++ {
		p.cycle()
	}
	p.take()
	for i := 0; i < cycles; i++ {
		p.cycle()
	}
	lat, wrong := p.take()
	if len(wrong) > 0 {
		t.Fatalf("the polite RESP client alone got wrong answers: %v", wrong[0])
	}
	return p99(lat), len(lat)
}

// politeDuring runs the polite client while abuse runs, and returns its
// p99, its count and its wrong answers.
func (p *respPolite) during(abuse func()) (time.Duration, int, []string) {
	stop, done := make(chan struct{}), make(chan struct{})
	go p.run(stop, done)
	abuse()
	// At least a few cycles under the abuse, even if it was quick.
	time.Sleep(200 * time.Millisecond)
	close(stop)
	<-done
	lat, wrong := p.take()
	return p99(lat), len(lat), wrong
}

// readAll reads what the server sends until it closes nc or the bound
// passes; closed is false in the latter case.
func readAll(nc net.Conn, bound time.Duration) (got string, closed bool) {
	nc.SetReadDeadline(time.Now().Add(bound))
	b, err := io.ReadAll(nc)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return string(b), false
	}
	return string(b), true
}
