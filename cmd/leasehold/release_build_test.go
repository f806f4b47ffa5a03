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

// TestReleaseBuild runs scripts/build-release.sh as a release would: the
// command it builds prints the version it was given and the checkout's
// commit and date (from -ldflags -X, with -buildvcs=false as in CI), and
// beside it are the manual pages, the completion scripts and the units.
// Then as from a source tarball (no git): the commit and date come from
// the environment, and without them the script refuses (64).
func TestReleaseBuild(t *testing.T) {
	if os.Getenv("LEASEHOLD_LONG") == "" {
		// The release flags (CGO_ENABLED=0, -trimpath) rebuild every
		// dependency: about 3 minutes of CPU on a cold cache, which the
		// default tier (CI's 45-minute budget) does not spend.
		// TestVersionLineLdflags checks the stamped version in it.
		t.Skip("long tier (LEASEHOLD_LONG=1): a release build from a cold cache")
	}
	git := tool(t, "git")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	rev := func() string {
		out, err := exec.CommandContext(ctx, git, "rev-parse", "HEAD").Output()
		if err != nil {
			t.Skipf("not a git checkout: %v", err)
		}
		return strings.TrimSpace(string(out))
	}
	script, err := filepath.Abs("../../scripts/build-release.sh")
	if err != nil {
		t.Fatal(err)
	}
	build := func(dir string, env ...string) (string, int) {
		cmd := exec.CommandContext(ctx, script, dir)
		cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
		cmd.Env = append(cmd.Env, env...)
		out, err := cmd.CombinedOutput()
		return string(out), exitCode(err)
	}
	version := func(dir string) string {
		out, err := exec.CommandContext(ctx, filepath.Join(dir, "leasehold"), "--version").Output()
		if err != nil {
			t.Fatalf("--version: %v", err)
		}
		return string(out)
	}

	before := rev()
	dir := t.TempDir()
	if out, code := build(dir, "LEASEHOLD_VERSION=v0.0.0-releasetest"); code != 0 {
		t.Fatalf("build-release.sh: exit %d\n%s", code, out)
	}
	after := rev() // others may commit meanwhile
	got := version(dir)
	m := regexp.MustCompile(`^leasehold v0\.0\.0-releasetest \(commit ([0-9a-f]{40})(\+modified)?, dated (\S+)\)\n$`).FindStringSubmatch(got)
	if m == nil || (m[1] != before && m[1] != after) {
		t.Fatalf("--version %q, want v0.0.0-releasetest and commit %s", got, after)
	}
	if _, err := time.Parse(time.RFC3339, m[3]); err != nil || !strings.HasSuffix(m[3], "Z") {
		t.Errorf("date %q: %v (want RFC 3339 in UTC)", m[3], err)
	}
	for _, f := range []string{"man/man1/leasehold.1", "man/man1/leasehold-run.1", "completion/leasehold.bash",
		"completion/_leasehold", "completion/leasehold.fish", "systemd/leasehold.service"} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}

	// A source tarball: no git repository around.
	tarball := []string{"GIT_DIR=" + filepath.Join(t.TempDir(), "none"), "GIT_CEILING_DIRECTORIES=/"}
	out, code := build(t.TempDir(), tarball...)
	if code != 64 || !strings.Contains(out, "LEASEHOLD_COMMIT") {
		t.Errorf("no git, no LEASEHOLD_*: exit %d, want 64\n%s", code, out)
	}
	dir2 := t.TempDir()
	if out, code := build(dir2, append(tarball, "LEASEHOLD_VERSION=v9.8.7", "LEASEHOLD_COMMIT=fedcba9876543210fedcba9876543210fedcba98",
		"LEASEHOLD_COMMIT_DATE=2026-08-01T12:00:00Z")...); code != 0 {
		t.Fatalf("build-release.sh from a tarball: exit %d\n%s", code, out)
	}
	if got, want := version(dir2), "leasehold v9.8.7 (commit fedcba9876543210fedcba9876543210fedcba98, dated 2026-08-01T12:00:00Z)\n"; got != want {
		t.Errorf("--version %q, want %q", got, want)
	}
}
