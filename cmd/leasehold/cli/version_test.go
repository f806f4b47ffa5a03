package cli

import (
	"strings"
	"testing"
)

// TestVersionLineLdflags: the Version, Commit and CommitDate a release
// build sets with -ldflags -X are printed, whatever the build recorded.
func TestVersionLineLdflags(t *testing.T) {
	v, c, d := Version, Commit, CommitDate
	t.Cleanup(func() { Version, Commit, CommitDate = v, c, d })
	Version, Commit, CommitDate = "v1.2.3", "0123456789abcdef0123456789abcdef01234567", "2026-08-01T12:00:00Z"
	want := "v1.2.3 (commit 0123456789abcdef0123456789abcdef01234567, dated 2026-08-01T12:00:00Z)"
	if got := versionLine(); got != want {
		t.Errorf("versionLine() = %q, want %q", got, want)
	}
	var out strings.Builder
	e := &env{stdout: &out, stderr: &out}
	if code := e.main(t.Context(), []string{"--version"}); code != 0 || out.String() != "leasehold "+want+"\n" {
		t.Errorf("--version: exit %d, %q", code, out.String())
	}
}

// TestPseudoVersionCommit: "go install ...@COMMIT" records a
// pseudo-version, whose commit and time --version shows.
func TestPseudoVersionCommit(t *testing.T) {
	for _, c := range []struct {
		v, commit, date string
		ok              bool
	}{
		{"v0.0.0-20260801120304-abcdef123456", "abcdef123456", "2026-08-01T12:03:04Z", true},
		{"v1.4.1-0.20260801120304-abcdef123456", "abcdef123456", "2026-08-01T12:03:04Z", true},
		{"v1.5.0-rc.1.0.20260801120304-abcdef123456", "abcdef123456", "2026-08-01T12:03:04Z", true},
		{"v0.0.0-20260801120304-abcdef123456+dirty", "abcdef123456", "2026-08-01T12:03:04Z", true},
		{"v1.4.0", "", "", false},
		{"v1.4.0-rc.1", "", "", false},
		{"(devel)", "", "", false},
		{"", "", "", false},
		{"v0.0.0-20261301120304-abcdef123456", "", "", false}, // month 13
		{"v0.0.0-20260801120304-ABCDEF123456", "", "", false},
	} {
		commit, date, ok := pseudoVersionCommit(c.v)
		if commit != c.commit || date != c.date || ok != c.ok {
			t.Errorf("pseudoVersionCommit(%q) = %q, %q, %v; want %q, %q, %v", c.v, commit, date, ok, c.commit, c.date, c.ok)
		}
	}
}
