package enginetest_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// clients/python/run_tests.sh runs the Python suite in two halves at once;
// found by the red team of that change (2026-12-05): a signal to the
// script after one half had ended left the other half and its processes
// running and exited 1 without their output (its clean-up ran under set -e
// and stopped at the first group already gone); the tests' temporary
// files (a server's data directory, 129 MB) were left behind; and a module
// unittest would find but neither half runs (testfoo.py, a subdirectory's
// test_X.py) was skipped with "OK". These run the script on a copy of the
// client with synthetic test modules.

// pythonCopy copies what run_tests.sh needs of clients/python into a
// temporary directory, with tests/ holding modules (path: text), and
// returns the copy's run_tests.sh.
func pythonCopy(t *testing.T, modules map[string]string) string {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		if os.Getenv("LEASEHOLD_REQUIRE_ENGINES") == "1" {
			t.Fatal("no /usr/bin/python3 (scripts/engines.sh installs it)")
		}
		t.Skip("no /usr/bin/python3")
	}
	src, err := filepath.Abs(filepath.Join("..", "..", "clients", "python"))
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "python")
	if err := os.MkdirAll(filepath.Join(dst, "tests"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"run_tests.sh", "pyproject.toml", "leasehold", "tests/engines.py"} {
		if out, err := exec.Command("cp", "-r", filepath.Join(src, name), filepath.Join(dst, name)).CombinedOutput(); err != nil {
			t.Fatalf("cp %s: %v\n%s", name, err, out)
		}
	}
	for name, text := range modules {
		p := filepath.Join(dst, "tests", name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dst, "run_tests.sh")
}

const pyFast = "import unittest\nclass T(unittest.TestCase):\n    def test_fast(self):\n        pass\n"

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || !strings.HasPrefix(s[i+1:], " Z")
}

// TestPythonRunnerSignalAfterOneHalf: SIGTERM to run_tests.sh once the
// first half has ended and while the second runs a test with a child
// process and a temporary directory: exit 143, the child gone, the
// directory gone.
func TestPythonRunnerSignalAfterOneHalf(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "slow")
	script := pythonCopy(t, map[string]string{
		"test_a_fast.py": pyFast,
		"test_z_slow.py": `import os, subprocess, tempfile, time, unittest
class T(unittest.TestCase):
    def test_slow(self):
        d = tempfile.mkdtemp(prefix="leasehold-py-")
        p = subprocess.Popen(["sleep", "301"])
        with open(os.environ["PIDFILE"] + ".tmp", "w") as f:
            f.write("%d %s" % (p.pid, d))
        os.rename(os.environ["PIDFILE"] + ".tmp", os.environ["PIDFILE"])
        time.sleep(300)
`,
	})
	cmd := exec.Command("bash", script)
	cmd.Env = append(os.Environ(), "LEASEHOLD_BIN=/bin/true", "PIDFILE="+pidFile)
	out := startGroup(t, cmd)
	var pid int
	var dir string
	for deadline := time.Now().Add(2 * time.Minute); ; {
		if b, err := os.ReadFile(pidFile); err == nil {
			f := strings.Fields(string(b))
			pid, _ = strconv.Atoi(f[0])
			dir = f[1]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slow test did not start within 2 minutes:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	// Once the fast half (one empty test) has ended: the script prints
	// the first half's output when it ends, before it waits for the second.
	for deadline := time.Now().Add(2 * time.Minute); !strings.Contains(out.String(), "Ran 1 test"); {
		if time.Now().After(deadline) {
			t.Fatalf("the fast half did not end within 2 minutes:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("run_tests.sh did not exit within 30 s of SIGTERM:\n%s", out.String())
	}
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 143 {
		t.Errorf("run_tests.sh after SIGTERM: %v, want exit 143\n%s", err, out.String())
	}
	for deadline := time.Now().Add(5 * time.Second); alive(pid) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if alive(pid) {
		t.Errorf("the slow test's child (pid %d) still runs after run_tests.sh exited", pid)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("the slow test's temporary directory %s is still there", dir)
	}
}

// TestPythonRunnerRefusesModulesOutsideHalves: a module unittest would
// find that neither half runs fails the run, naming it.
func TestPythonRunnerRefusesModulesOutsideHalves(t *testing.T) {
	fail := "import unittest\nclass T(unittest.TestCase):\n    def test_f(self):\n        self.fail('x')\n"
	for _, name := range []string{"testfoo.py", "test_Upper.py", "sub/test_zed.py"} {
		t.Run(name, func(t *testing.T) {
			modules := map[string]string{"test_a_fast.py": pyFast, name: fail}
			if strings.Contains(name, "/") {
				modules[filepath.Join(filepath.Dir(name), "__init__.py")] = ""
			}
			cmd := exec.Command("bash", pythonCopy(t, modules))
			cmd.Env = append(os.Environ(), "LEASEHOLD_BIN=/bin/true")
			out, err := cmd.CombinedOutput()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "tests/"+name+" is in neither half") {
				t.Fatalf("run_tests.sh with tests/%s: %v, want exit 1 naming it:\n%s", name, err, out)
			}
		})
	}
}
