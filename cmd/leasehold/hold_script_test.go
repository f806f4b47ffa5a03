//go:build unix

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestHoldScriptExample runs the script example of "hold --help" (hold in
// the background of a script, wait for the grant, work, end the hold) in
// bash, its "..." being work that checks the lease is held. The script
// exits 0, hold says it released the lease and never that it lost it, and
// the lease is free afterwards. Red team of issue 29: the example released
// the lease from outside with "leasehold release", and the background hold
// then said "lost" and exited 76 (what a release from outside still does,
// TestHoldRelease; the store cannot tell it from an expiry).
func TestHoldScriptExample(t *testing.T) {
	sh := tool(t, "bash")
	store, _ := newStore(t)
	code, help := runLH(t, "hold", "--help")
	i := strings.Index(help, "# From a script")
	if code != 0 || i < 0 {
		t.Fatalf("hold --help: exit %d, no script example:\n%s", code, help)
	}
	example, _, _ := strings.Cut(help[i:], "\n\n")
	const work = "\n  ...\n"
	if !strings.Contains(example, work) || !strings.Contains(example, "&\n") {
		t.Fatalf("the example has no background hold or no work (...):\n%s", example)
	}
	script := strings.Replace(example, work, "\n"+`leasehold status deploy/prod | grep -q deploy/prod || { echo "not held while working"; exit 9; }`+"\n", 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, sh, "-e", "-c", script)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"), "LEASEHOLD_STORE="+store)
	// Ends when every process that has the output does: hold too.
	out, err := cmd.CombinedOutput()
	if exitCode(err) != 0 || !strings.Contains(string(out), "released deploy/prod") || strings.Contains(string(out), "lost") {
		t.Fatalf("the script: exit %d (want 0, hold released, nothing lost):\n%s\nscript:\n%s", exitCode(err), out, script)
	}
	if _, ok := heldBy(t, store, "deploy/prod"); ok {
		t.Error("deploy/prod is still held after the script")
	}
}
