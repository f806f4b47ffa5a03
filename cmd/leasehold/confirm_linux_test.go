//go:build linux

package main

import (
	"context"
	"testing"
	"time"
)

// TestForceReleaseConfirm runs force-release on a terminal: it names the
// holder and asks; "n" (or anything but y/yes) changes nothing and exits
// 1 (not a usage error: issue 29, item 6; it exited 64), "y" releases (the
// holder then exits 76).
func TestForceReleaseConfirm(t *testing.T) {
	store, _ := newStore(t)
	h := startHold(t, store, "--ttl", "6s", "--owner", "tester/9", "fc/a")
	ask := func(answer string) int {
		t.Helper()
		p := openPTY(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := leasehold(ctx, "force-release", "--store", store, "fc/a")
		p.start(cmd)
		p.expect(0, "Force-release fc/a, held by tester/9 (token 1, expires in ")
		p.expect(0, "? [y/N] ")
		p.typeIn(answer + "\n")
		code := exitCode(cmd.Wait())
		t.Logf("answer %q: exit %d; terminal:\n%s", answer, code, p.output())
		return code
	}
	if code := ask("n"); code != 1 {
		t.Errorf("answer n: exit %d, want 1", code)
	}
	if l, ok := heldBy(t, store, "fc/a"); !ok || l.Owner != "tester/9" {
		t.Fatalf("after answering n: held=%v %+v, want still held by tester/9", ok, l)
	}
	if code := ask("y"); code != 0 {
		t.Errorf("answer y: exit %d, want 0", code)
	}
	if _, ok := heldBy(t, store, "fc/a"); ok {
		t.Error("still held after answering y")
	}
	if code := h.wait(t); code != 76 {
		t.Errorf("hold after force-release: exit %d, want 76", code)
	}
}
