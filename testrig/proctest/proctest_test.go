package proctest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestFreeAddrs: the addresses are loopback ones, all different, and free
// (each can be listened on).
func TestFreeAddrs(t *testing.T) {
	addrs := FreeAddrs(t, 8)
	seen := map[string]bool{}
	for _, a := range addrs {
		if seen[a] {
			t.Fatalf("%s twice in %v", a, addrs)
		}
		seen[a] = true
		ln, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("listen on %s: %v", a, err)
		}
		ln.Close()
	}
	if len(addrs) != 8 {
		t.Fatalf("%d addresses, want 8", len(addrs))
	}
}

// TestFreeAddrBelowEphemeral: FreeAddr's ports are below the kernel's
// ephemeral range, so an outgoing connection's source port cannot take
// one before the server binds it. Before, they were drawn from it (a
// listen on port 0) and a server of the R11 suite lost its port so.
func TestFreeAddrBelowEphemeral(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Skip("no /proc/sys/net/ipv4/ip_local_port_range here")
	}
	var low, high int
	if _, err := fmt.Sscan(string(b), &low, &high); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		_, port, _ := net.SplitHostPort(FreeAddr(t))
		if p, _ := strconv.Atoi(port); p >= low && p <= high {
			t.Fatalf("port %s is in the ephemeral range %d-%d", port, low, high)
		}
	}
}

// TestBuffer: concurrent writers' bytes all arrive.
func TestBuffer(t *testing.T) {
	var b Buffer
	done := make(chan struct{})
	for range 4 {
		go func() {
			for range 100 {
				b.Write([]byte("x"))
			}
			done <- struct{}{}
		}()
	}
	for range 4 {
		<-done
	}
	if n := len(b.String()); n != 400 {
		t.Fatalf("%d bytes, want 400", n)
	}
}

// TestMarkTreesReapsDetachedTree: a subtest starts a tree whose parts
// outlive their parent, one of them in a session of its own, all writing
// into the subtest's temporary directory. The subtest's cleanup must kill
// them all before that directory is removed (else RemoveAll fails with
// "directory not empty" and the subtest fails), and none may run after.
func TestMarkTreesReapsDetachedTree(t *testing.T) {
	if _, err := os.Stat("/proc/self/environ"); err != nil {
		t.Skip("no /proc here")
	}
	var dir, kv string
	t.Run("tree", func(t *testing.T) {
		kv = MarkTrees(t)
		dir = t.TempDir()
		script := `(while :; do echo x >> "$1/a.$$"; sleep 0.001; done) &
setsid sh -c 'while :; do echo y >> "$0/b.$$"; sleep 0.001; done' "$1" &
exit 0`
		// No pipes: the writers would keep them open.
		if err := exec.Command("sh", "-c", script, "sh", dir).Run(); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if m, _ := filepath.Glob(filepath.Join(dir, "[ab].*")); len(m) == 2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the tree's two writers did not start")
			}
		}
		if n := len(Marked([]byte(kv))); n < 2 {
			t.Errorf("%d marked processes running, want at least the two writers", n)
		}
	})
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the subtest's directory is still there (%v)", err)
	}
	if left := Marked([]byte(kv)); len(left) > 0 {
		t.Errorf("processes of the subtest still run: %v", left)
	}
	if got := os.Getenv(TreeMark); got != "" {
		t.Errorf("%s=%q after the subtest, want it unset", TreeMark, got)
	}
}

// TestWaitReadySilentServer: a server that takes the connection but never
// answers (a stopped or stuck process whose socket still listens: the
// kernel completes the handshake) is not ready, and WaitReady says so
// after its limit instead of waiting for an answer for ever, as it did
// with a GET without a timeout.
func TestWaitReadySilentServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// Never accepted: the connection waits in the listen queue, as with a
	// stopped server; the request is sent into the socket's buffer.
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- waitReady("http://"+ln.Addr().String()+"/readyz", 200*time.Millisecond) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a server that never answers was reported ready")
		}
		t.Logf("after %s: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(60 * time.Second):
		t.Fatal("WaitReady of a server that never answers still waits after 60s (limit 200ms)")
	}
}

// recordingTB records the errors reported to it instead of failing the
// test: the test below checks that a watchdog fails the test it watches.
type recordingTB struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *recordingTB) reported() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.errs, "\n")
}

// TestMarkTreesWithinEndsStuckWait: a test waits for a process that has
// stopped itself (SIGSTOP), its output going to a pipe: a wait that never
// ends by itself. Past the watchdog's limit the test is failed with the
// process's state (T, stopped) and command line and the goroutines, and
// the process is killed, so the wait ends. With MarkTrees alone (no
// watchdog) the wait was still blocked at this test's limit.
func TestMarkTreesWithinEndsStuckWait(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc here")
	}
	rt := &recordingTB{TB: t}
	MarkTreesWithin(rt, 3*time.Second)
	cmd := exec.Command("sh", "-c", "kill -STOP $$; echo never")
	var out Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil || out.String() != "" {
			t.Errorf("the stopped process exited %v with output %q, want killed, silent", err, out.String())
		}
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the wait for a stopped process still blocks 60s after it began (watchdog limit 3s)")
	}
	got := rt.reported()
	if lines := strings.SplitN(got, "\n", 4); len(lines) > 3 {
		t.Logf("the report begins:\n%s", strings.Join(lines[:3], "\n"))
	}
	for _, want := range []string{"still running", "(limit 3s)", "state T,", "sh -c kill -STOP $$; echo never", "goroutines of the test binary:", "TestMarkTreesWithinEndsStuckWait"} {
		if !strings.Contains(got, want) {
			t.Errorf("the watchdog's report lacks %q:\n%s", want, got)
		}
	}
}

// TestFreeAddrsNeverRepeatWithinATest: a port handed out stays reserved
// for the rest of the test, although its listener is closed at once (a
// server killed and restarted on it leaves it unbound meanwhile). Before
// the reservation, 500 draws from the ~12,000 ports below the ephemeral
// range repeated one with a probability above 99.99 %.
func TestFreeAddrsNeverRepeatWithinATest(t *testing.T) {
	seen := map[string]int{}
	for i := range 500 {
		a := FreeAddr(t)
		if j, ok := seen[a]; ok {
			t.Fatalf("FreeAddr call %d returned %s again (first at call %d)", i, a, j)
		}
		seen[a] = i
	}
}

// TestReservedPortRefusedElsewhere: a port reserved by one test is refused
// to another (here another testing.TB of the same process; a second
// process sees the same flock), and free again after the first's cleanup.
func TestReservedPortRefusedElsewhere(t *testing.T) {
	_, ps, _ := net.SplitHostPort(FreeAddr(t))
	port, _ := strconv.Atoi(ps)
	var again bool
	t.Run("other", func(t *testing.T) { again = reservePort(t, port) })
	if again {
		t.Fatalf("port %d, reserved by this test, was reserved again by another", port)
	}
	var inner int
	t.Run("first", func(t *testing.T) {
		_, ps, _ := net.SplitHostPort(FreeAddr(t))
		inner, _ = strconv.Atoi(ps)
	})
	if !reservePort(t, inner) {
		t.Fatalf("port %d stayed reserved after the test that took it ended", inner)
	}
}
