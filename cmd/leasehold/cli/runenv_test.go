package cli

import (
	"os"
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
