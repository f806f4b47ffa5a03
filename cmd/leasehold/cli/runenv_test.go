package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestRunEnvironmentDocumented (issue 29 red team): every LEASEHOLD_
// variable that run adds to its command's environment is in "run --help"
// and in the README's list; LEASEHOLD_CONTROL (the socket through which
// the command releases its own lease) was in neither.
func TestRunEnvironmentDocumented(t *testing.T) {
	h := newHarness(t)
	r := h.run("run", "--store", "memory://", "t/env", "--", "env")
	if r.code != 0 {
		t.Fatalf("run env: exit %d, stderr %q", r.code, r.stderr)
	}
	inherited := map[string]bool{}
	for _, kv := range os.Environ() {
		inherited[strings.SplitN(kv, "=", 2)[0]] = true
	}
	var added []string
	for _, line := range strings.Split(r.stdout, "\n") {
		if m := regexp.MustCompile(`^(LEASEHOLD_[A-Z_]+)=`).FindStringSubmatch(line); m != nil && !inherited[m[1]] {
			added = append(added, m[1])
		}
	}
	if len(added) < 4 {
		t.Fatalf("run added only %q to its command's environment:\n%s", added, r.stdout)
	}
	help := h.run("run", "--help")
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range added {
		if !regexp.MustCompile(`(?m)^  ` + v + ` `).MatchString(help.stdout) {
			t.Errorf("run --help does not list %s among the command's variables", v)
		}
		if !strings.Contains(string(readme), "`"+v+"`") {
			t.Errorf("README.md does not mention `%s`", v)
		}
	}
}

// TestRunControlLongTmpdir (the red team of 2026-12-06): with a TMPDIR of
// 75 bytes or more the control socket's path was too long for a Unix
// socket, and run gave its command no LEASEHOLD_CONTROL without a word
// (a "leasehold release" in the command then failed on its arguments).
// The socket goes to /tmp then.
func TestRunControlLongTmpdir(t *testing.T) {
	long := t.TempDir() + "/" + strings.Repeat("d", 90)
	if err := os.Mkdir(long, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", long)
	h := newHarness(t)
	r := h.run("run", "--store", "memory://", "t/ctl", "--", "sh", "-c", `echo "CTL=$LEASEHOLD_CONTROL"`)
	if r.code != 0 {
		t.Fatalf("run: exit %d, stderr %q", r.code, r.stderr)
	}
	m := regexp.MustCompile(`(?m)^CTL=(.*)$`).FindStringSubmatch(r.stdout)
	if m == nil || m[1] == "" {
		t.Fatalf("no LEASEHOLD_CONTROL with a TMPDIR of %d bytes: stdout %q, stderr %q", len(long), r.stdout, r.stderr)
	}
	if !strings.HasPrefix(m[1], "/tmp/leasehold-run-") {
		t.Errorf("LEASEHOLD_CONTROL=%s, want it in /tmp", m[1])
	}
}

// TestRunControlRelativeTmpdir: with a relative TMPDIR, LEASEHOLD_CONTROL
// is absolute, in that directory as seen from where run started, so a
// command that changes its directory still reaches it (the red team's
// second look at 2026-12-06: it was relative, and the command's release
// after a cd went to the store; run then called the lease lost, exit 76).
func TestRunControlRelativeTmpdir(t *testing.T) {
	cwd := t.TempDir()
	if err := os.Mkdir(filepath.Join(cwd, "rel"), 0o700); err != nil {
		t.Fatal(err)
	}
	t.Chdir(cwd)
	t.Setenv("TMPDIR", "rel")
	h := newHarness(t)
	r := h.run("run", "--store", "memory://", "t/ctl", "--", "sh", "-c", `cd / && test -S "$LEASEHOLD_CONTROL" && echo "CTL=$LEASEHOLD_CONTROL"`)
	m := regexp.MustCompile(`(?m)^CTL=(.*)$`).FindStringSubmatch(r.stdout)
	if r.code != 0 || m == nil {
		t.Fatalf("run with TMPDIR=rel: exit %d, stdout %q, stderr %q; want the socket reachable after the command's cd /", r.code, r.stdout, r.stderr)
	}
	if !strings.HasPrefix(m[1], filepath.Join(cwd, "rel")+"/leasehold-run-") {
		t.Errorf("LEASEHOLD_CONTROL=%s, want it under %s", m[1], filepath.Join(cwd, "rel"))
	}
}
