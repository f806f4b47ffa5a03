package serverbench

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/testrig/proctest"
)

// TestServerProcess starts the engine as a server process of its own,
// runs pairs and a handoff through it, and checks that close leaves no
// process behind and that the log holds what was granted: a second server
// on the same directory sees the handoff's holder.
func TestServerProcess(t *testing.T) {
	proctest.MarkTrees(t) // a child left behind fails the test, and is killed
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "log")
	p, err := startServerProcess(childConfig{dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	l, err := respLocker("process", p.addr, 2, p.stop)
	if err != nil {
		t.Fatal(err)
	}
	for c := range 2 {
		if err := l.pair(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	held, err := l.wait(ctx, "keeper")
	if err != nil {
		t.Fatal(err)
	}
	l.close()
	if err := p.cmd.Process.Signal(syscall.Signal(0)); err == nil {
		t.Fatal("the server process still runs after close")
	}

	p2, err := startServerProcess(childConfig{dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	l2, err := respLocker("again", p2.addr, 1, p2.stop)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.close()
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := l2.wait(wctx, "other"); err == nil {
		t.Fatalf("granted to another owner while %v holds it after the restart", held.(leasehold.Record))
	}
}

func TestDecodeChildRefusesBadSpec(t *testing.T) {
	for _, s := range []string{"", "true", "maybe,0,/x", "false,x,/x"} {
		if _, err := decodeChild(s); err == nil {
			t.Errorf("decodeChild(%q) accepted", s)
		}
	}
	c := childConfig{dir: "/a,b", noSync: true, logSyncs: 2}
	if got, err := decodeChild(c.encode()); err != nil || got != c {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
}
