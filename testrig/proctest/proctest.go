// Package proctest holds what tests that run programs and servers as
// processes share: a free loopback address to give a server, waiting for
// it to answer, a child's environment, the go command and building the
// leasehold command with it, a buffer its output goroutines may share.
// Both cmd/leasehold's end-to-end tests and the verification suites
// (testrig/verify) use it.
package proctest

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// FreeAddr returns a loopback TCP address (host:port) that was free a
// moment ago. Its port is below the kernel's ephemeral range, so that no
// outgoing connection takes it as its source port before the server binds
// it: a port chosen by listening on port 0 is an ephemeral one, and under
// a suite that makes thousands of connections a server started on it
// failed with "address already in use" (CI, TestR11HolderSpoofing).
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln := listenBelowEphemeral(t)
	defer ln.Close()
	return ln.Addr().String()
}

// portPick draws the ports listenBelowEphemeral tries.
var portPick = struct {
	sync.Mutex
	r *rand.Rand
}{r: rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(time.Now().UnixNano())))}

// listenBelowEphemeral listens on a random loopback port under the
// ephemeral range (Linux's ip_local_port_range; elsewhere below 32768),
// or, if none of 200 tries is free, on port 0.
func listenBelowEphemeral(t testing.TB) net.Listener {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	if from := max(1024, low-12000); from < low {
		for range 200 {
			portPick.Lock()
			port := from + portPick.r.IntN(low-from)
			portPick.Unlock()
			if !reservePort(t, port) {
				continue
			}
			if ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
				return ln
			}
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// reservePort reserves port for the rest of t, across every process of
// the machine that picks ports here: it holds an exclusive flock on a
// file named after the port (in the temporary directory) until t's
// cleanup, or until the process dies. A port is free only while its
// server listens; a test that kills a server and restarts it on the same
// port (R18's failovers, R3's restarts) leaves it unbound meanwhile, and
// another test process picking ports then must not take it. It reports
// false if another test holds it. Without a lock file (a read-only
// temporary directory), it reserves nothing and reports true.
func reservePort(t testing.TB, port int) bool {
	dir := filepath.Join(os.TempDir(), "leasehold-test-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return true
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return true
	}
	if err := lockNB(f); err != nil {
		f.Close()
		return false
	}
	t.Cleanup(func() { f.Close() }) // closing the file drops the lock
	return true
}

// FreeAddrs returns n loopback TCP addresses that were free a moment ago,
// all different: each is taken while the others' listeners are still
// open (two FreeAddr calls one after the other can return the same one).
func FreeAddrs(t testing.TB, n int) []string {
	t.Helper()
	addrs := make([]string, n)
	for i := range addrs {
		ln := listenBelowEphemeral(t)
		defer ln.Close()
		addrs[i] = ln.Addr().String()
	}
	return addrs
}

// ReadyTimeout bounds one GET of Ready: a server that accepted the
// connection (the kernel does that for a listening socket even while the
// process is stopped or stuck) but does not answer is not ready. Without
// it the GET waited for ever, and so did the test.
const ReadyTimeout = 5 * time.Second

// readyClient is Ready's HTTP client: every request is bounded by
// ReadyTimeout.
var readyClient = &http.Client{Timeout: ReadyTimeout}

// Ready reports whether a GET of url answers 200 OK (a server's /readyz)
// within ReadyTimeout.
func Ready(url string) bool {
	resp, err := readyClient.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// WaitReady polls url (see Ready) every 20 ms until it answers 200 OK, and
// fails the test if it has not within d (and at most one ReadyTimeout
// more, for a GET under way at d).
func WaitReady(t testing.TB, url string, d time.Duration) {
	t.Helper()
	if err := waitReady(url, d); err != nil {
		t.Fatal(err)
	}
}

// waitReady is WaitReady's loop; its error says how the last GET went.
func waitReady(url string, d time.Duration) error {
	for deadline := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		resp, err := readyClient.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer 200 within %s (last: %v)", url, d, err)
		}
	}
}

// EnvWithout returns this process's environment without the variables
// named in drop.
func EnvWithout(drop ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(drop, k) {
			env = append(env, kv)
		}
	}
	return env
}

// BuildLeasehold builds the leasehold command (this module's cmd/leasehold)
// into dir with the go command (GoCommand), these extra build flags and
// environment (nil: this process's), and returns its path. The error
// carries the go command's output.
func BuildLeasehold(dir string, env []string, flags ...string) (string, error) {
	goBin := GoCommand()
	if goBin == "" {
		return "", errors.New("no go command (neither in GOROOT/bin nor on PATH) to build leasehold with")
	}
	bin := filepath.Join(dir, "leasehold")
	args := append(append([]string{"build", "-o", bin}, flags...), "github.com/leasehold/leasehold/cmd/leasehold")
	cmd := exec.Command(goBin, args...)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build leasehold %v: %v\n%s", flags, err, out)
	}
	return bin, nil
}

// GoCommand returns the go command: the one of the toolchain that built
// this test binary, else the first on PATH; "" where there is none.
func GoCommand() string {
	if root := runtime.GOROOT(); root != "" {
		p := filepath.Join(root, "bin", "go")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p, err := exec.LookPath("go")
	if err != nil {
		return ""
	}
	return p
}

// Buffer is a bytes.Buffer that concurrent writers may share (a process's
// stdout and stderr copiers, a watchdog) while the test reads it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
