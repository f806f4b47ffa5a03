package proctest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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
