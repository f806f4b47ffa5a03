//go:build unix

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestVersionFlag: --version and version print one line; a build without
// VCS stamps (TestMain's, under GOFLAGS=-buildvcs=false as the scripts
// set) says "unknown" for the commit and date, and a build with them
// names the checkout's commit and its date.
func TestVersionFlag(t *testing.T) {
	code, out := runLH(t, "--version")
	code2, out2 := runLH(t, "version")
	if code != 0 || code2 != 0 || out != out2 || !strings.HasPrefix(out, "leasehold ") || strings.Count(out, "\n") != 1 {
		t.Fatalf("--version: exit %d %q; version: exit %d %q", code, out, code2, out2)
	}
	if os.Getenv("GOFLAGS") == "-buildvcs=false" && !strings.Contains(out, "(commit unknown, dated unknown)") {
		t.Errorf("a build without VCS stamps: %q", out)
	}

	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git: the VCS-stamped build is not checked")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rev := func() string {
		out, err := exec.CommandContext(ctx, git, "rev-parse", "HEAD").Output()
		if err != nil {
			t.Skipf("not a git checkout: %v", err)
		}
		return strings.TrimSpace(string(out))
	}
	before := rev()
	stamped := filepath.Join(t.TempDir(), "leasehold")
	build := exec.CommandContext(ctx, "go", "build", "-buildvcs=true", "-o", stamped, ".")
	build.Env = append(os.Environ(), "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -buildvcs=true: %v\n%s", err, out)
	}
	after := rev() // others may commit meanwhile
	b, err := exec.CommandContext(ctx, stamped, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^leasehold \S+ \(commit ([0-9a-f]{40})(\+modified)?, dated (\S+)\)\n$`).FindStringSubmatch(string(b))
	if m == nil || (m[1] != before && m[1] != after) {
		t.Fatalf("stamped --version %q, want commit %s", b, after)
	}
	if _, err := time.Parse(time.RFC3339, m[3]); err != nil {
		t.Errorf("stamped --version date %q: %v", m[3], err)
	}
}
