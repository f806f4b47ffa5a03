package cli

import (
	"os"
	"testing"
)

func TestStoreInit(t *testing.T) {
	h := newHarness(t)
	r := h.run("store", "init", "--store", h.url)
	if r.code != ExitOK {
		t.Fatalf("store init: exit %d, stderr %q", r.code, r.stderr)
	}
	if _, err := os.Stat(h.path); err != nil {
		t.Fatalf("store init did not create the file: %v", err)
	}
	if r := h.run("store", "init", "--store", h.url); r.code != ExitOK {
		t.Fatalf("second store init: exit %d, stderr %q", r.code, r.stderr)
	}
	for _, bad := range []string{"nosuch://x", "sqlite:///x.db?mode=ro"} {
		if r := h.run("store", "init", "--store", bad); r.code != ExitUsage {
			t.Errorf("store init --store %s: exit %d, want %d (stderr %q)", bad, r.code, ExitUsage, r.stderr)
		}
	}
	if r := h.run("store"); r.code != ExitUsage {
		t.Errorf("store without subcommand: exit %d", r.code)
	}
}
