package server

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// breakFiles makes every file descriptor of this process open on a file
// under dir refer to /dev/full instead, so that the next write or sync
// through it fails, as on a full or failing disk.
func breakFiles(t *testing.T, dir string) int {
	t.Helper()
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("no /dev/full: %v", err)
	}
	defer full.Close()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	n := 0
	for _, ent := range ents {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", ent.Name()))
		if err != nil || !strings.HasPrefix(target, dir+string(filepath.Separator)) {
			continue
		}
		fd, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		if err := unix.Dup2(int(full.Fd()), fd); err != nil {
			t.Fatal(err)
		}
		n++
	}
	return n
}

// TestReadyOnceLogBroken (the red team of the RESP direct path, F1): once
// a write of the log failed (its data directory on a full tmpfs, in the
// red team's run) every change was refused with an internal error, yet
// LH.READY said +OK and /readyz 200 "ready", so a load balancer kept
// sending traffic. Ready now fails with ErrLogBroken, and both say so.
func TestReadyOnceLogBroken(t *testing.T) {
	dir := t.TempDir()
	e, err := OpenEngine(EngineConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	ctx := context.Background()
	if _, err := e.Acquire(ctx, pxReq("before", "a", time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := e.Ready(ctx); err != nil {
		t.Fatalf("Ready with a working log: %v", err)
	}
	_, rs := rtServe(t, e, RESPOptions{})
	c := rtDial(t, rs)
	rtExpect(t, "LH.READY with a working log", c.do("LH.READY"), "+OK")
	hs := httptest.NewServer(NewHandler(e, HandlerOptions{}))
	t.Cleanup(hs.Close)

	if n := breakFiles(t, dir); n == 0 {
		t.Fatal("no file of the log was open")
	}
	if _, err := e.Acquire(ctx, pxReq("after", "a", time.Minute)); err == nil {
		t.Fatal("an acquire succeeded with the log's files on /dev/full")
	}
	if err := e.Ready(ctx); !errors.Is(err, ErrLogBroken) {
		t.Fatalf("Ready once the log broke: %v, want ErrLogBroken", err)
	}
	rtExpect(t, "LH.READY once the log broke", c.do("LH.READY"), "-ERR not ready: the server's log failed")
	resp, err := http.Get(hs.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/readyz once the log broke: %d, want 503", resp.StatusCode)
	}
}
