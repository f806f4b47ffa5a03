package partition_test

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/leasehold/leasehold/testrig/enginetest"
	"github.com/leasehold/leasehold/testrig/proctest"
	"github.com/leasehold/leasehold/testrig/verify"
)

// TestR7WithoutRoot runs R7 and its network test in a copy of this test
// binary as an unprivileged user (nobody): outside CI both skip, saying
// that root is missing; where engines are required (CI=true or
// LEASEHOLD_REQUIRE_ENGINES=1, as in scripts/test.sh and scripts/verify.sh)
// both fail, so that a CI run that cannot build R7's network never passes
// by skipping it. It needs root itself (to start the child as another
// user).
func TestR7WithoutRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("starts a copy of this test as user nobody, which needs root")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A copy that nobody may run (go test's build directory is private).
	dir, err := os.MkdirTemp("", "leasehold-r7-child-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "partition.test")
	if err := copyFile(exe, bin); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	drop := []string{"CI", enginetest.RequireVar, verify.EnvWorker, envNetns, "LEASEHOLD_VERIFY_REPORT", "LEASEHOLD_LONG"}
	for _, tc := range []struct {
		env  []string
		want string // how both tests must end
	}{
		{nil, "SKIP"},
		{[]string{"CI=true"}, "FAIL"},
		{[]string{enginetest.RequireVar + "=1"}, "FAIL"},
		{[]string{"CI=true", enginetest.RequireVar + "=0"}, "SKIP"},
	} {
		cmd := exec.Command(bin, "-test.run=^(TestR7|TestNetPartition)$", "-test.v", "-test.count=1")
		cmd.Dir = dir
		cmd.Env = append(proctest.EnvWithout(drop...), tc.env...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, _ := cmd.CombinedOutput()
		for _, name := range []string{"TestR7", "TestNetPartition"} {
			m := regexp.MustCompile(`--- (PASS|FAIL|SKIP): ` + name + ` `).FindStringSubmatch(string(out))
			if m == nil || m[1] != tc.want {
				t.Errorf("%s as nobody with %v: ended %v, want %s:\n%s", name, tc.env, m, tc.want, out)
			}
		}
		if !strings.Contains(string(out), "missing here: root") {
			t.Errorf("with %v: the message does not say that root is missing:\n%s", tc.env, out)
		}
	}
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
