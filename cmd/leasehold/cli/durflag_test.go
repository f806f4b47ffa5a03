package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDurationFlagsTakeSeconds (issue 29's red team, #13): every duration
// flag takes bare seconds, as -w and a URL's connect_timeout= do: --ttl
// 30 was refused ("time: missing unit in duration"), --connect-timeout 5
// too ("not a positive duration such as 5s"). Bad values are still usage
// errors that take nothing.
func TestDurationFlagsTakeSeconds(t *testing.T) {
	h := newHarness(t)
	mark := filepath.Join(t.TempDir(), "go")
	_, done := h.start("--connect-timeout", "5", "run", "--store", h.url, "--ttl", "30", "--grace", "2.5", "d",
		"--", "sh", "-c", `while [ ! -e "$0" ]; do sleep 0.05; done`, mark)
	var ttl time.Duration
	for end := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if rec, err := h.store().Get(t.Context(), "d"); err == nil {
			ttl = rec.TTL
			break
		}
		select {
		case r := <-done:
			t.Fatalf("run --ttl 30 --grace 2.5 --connect-timeout 5: exit %d before taking the lease; stderr %q", r.code, r.stderr)
		default:
		}
		if time.Now().After(end) {
			t.Fatal("run --ttl 30 did not take the lease within 60 s")
		}
	}
	if err := os.WriteFile(mark, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := h.await(done, "run", "--ttl", "30"); r.code != 0 || ttl != 30*time.Second {
		t.Errorf("run --ttl 30 --grace 2.5 --connect-timeout 5: exit %d, TTL %s, want 0 and 30s; stderr %q", r.code, ttl, r.stderr)
	}
	for _, bad := range [][]string{
		{"run", "--store", h.url, "--ttl", "30x", "b", "--", "true"},
		{"run", "--store", h.url, "--grace", "soon", "b", "--", "true"},
		{"--connect-timeout", "0", "run", "--store", h.url, "b", "--", "true"},
		{"hold", "--store", h.url, "--ttl", "-5", "b"},
	} {
		if r := h.run(bad...); r.code != ExitUsage || !strings.Contains(r.stderr, "seconds") && !strings.Contains(r.stderr, "ttl") {
			t.Errorf("%q: exit %d, want %d; stderr %q", bad, r.code, ExitUsage, r.stderr)
		}
	}
	if _, err := h.store().Get(t.Context(), "b"); err == nil {
		t.Error("a refused command took the lease b")
	}
}
