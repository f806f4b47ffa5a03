package proctest

import (
	"net"
	"testing"
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
