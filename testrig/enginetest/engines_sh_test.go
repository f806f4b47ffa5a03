package enginetest_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/testrig/enginetest"
	"github.com/leasehold/leasehold/testrig/proctest"
)

// fakeEngine is a stand-in for an engine's program that cannot start. It
// first records the PIDs of the engines scripts/engines.sh has started so
// far (from the state directory the script keeps them in; not its own),
// so that the test can check that the script stopped every one of them.
const fakeEngine = `#!/bin/sh
for f in "$LEASEHOLD_ENGINES_DIR"/*.dir; do
	[ -f "$f" ] || continue
	d=$(cat "$f")
	for p in "$d/pid" "$d/redis.pid" "$d/data/postmaster.pid"; do
		[ -s "$p" ] || continue
		pid=$(head -n 1 "$p")
		[ "$pid" = $$ ] || echo "$pid"
	done
done >"$FAKE_ENGINE_RECORD"
echo "fake $(basename "$0"): cannot start, on purpose" >&2
exit 1
`

// TestEnginesStartFails runs scripts/engines.sh start with one engine
// whose program exits at once, and checks what scripts/test.sh relies on:
// the script exits non-zero, names the engine and prints its log on
// stderr, and leaves none of the engines it started before running. It
// never installs anything (LEASEHOLD_ENGINES_NO_INSTALL): it needs the
// engines scripts/engines.sh installs, and is missing-engine like any
// other test without them.
func TestEnginesStartFails(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL, Redis and dynalite")
	}
	script, err := filepath.Abs(filepath.Join("..", "..", "scripts", "engines.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		program, engine string
		before          int // engines started before it: PostgreSQL, Redis, dynalite
	}{
		{"redis-server", "Redis", 1},
		{"etcd", "etcd", 3},
	} {
		t.Run(tc.engine, func(t *testing.T) {
			bin := t.TempDir()
			if err := os.WriteFile(filepath.Join(bin, tc.program), []byte(fakeEngine), 0o755); err != nil {
				t.Fatal(err)
			}
			state, record := t.TempDir(), filepath.Join(t.TempDir(), "pids")
			t.Cleanup(func() { killRecorded(record) }) // should there be any left, after a failure
			cmd := exec.Command("bash", script, "start")
			cmd.Env = append(proctest.EnvWithout("LEASEHOLD_ENGINES_DIR", "LEASEHOLD_NPM_DIR", "PATH", "FAKE_ENGINE_RECORD"),
				"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
				"LEASEHOLD_ENGINES_DIR="+state,
				"LEASEHOLD_ENGINES_NO_INSTALL=1",
				"FAKE_ENGINE_RECORD="+record)
			if mods := os.Getenv("LEASEHOLD_TEST_NODE_MODULES"); mods != "" {
				cmd.Env = append(cmd.Env, "LEASEHOLD_NPM_DIR="+filepath.Dir(mods))
			}
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			t.Logf("stderr of engines.sh start:\n%s", stderr.String())
			if strings.Contains(stderr.String(), "not installed") {
				enginetest.Missing(t, "the engines of scripts/engines.sh", "it says some are not installed")
			}
			if _, ok := err.(*exec.ExitError); !ok {
				t.Fatalf("engines.sh start with %s failing: %v, want a non-zero exit", tc.program, err)
			}
			if want := "FAILED: " + tc.engine + " did not start"; !strings.Contains(stderr.String(), want) {
				t.Errorf("stderr does not say %q", want)
			}
			if want := "fake " + tc.program + ": cannot start, on purpose"; !strings.Contains(stderr.String(), want) {
				t.Errorf("stderr lacks the engine's log (%q)", want)
			}
			pids := recorded(t, record)
			if len(pids) != tc.before {
				t.Fatalf("%d engines were running when %s was started (PIDs %v), want %d", len(pids), tc.program, pids, tc.before)
			}
			for _, pid := range pids {
				if running(pid) {
					t.Errorf("engine process %d still runs after engines.sh start failed", pid)
				}
			}
			if left, _ := filepath.Glob(filepath.Join(state, "*.dir")); len(left) != 0 {
				t.Errorf("engines left in the state directory: %v", left)
			}
		})
	}
}

func recorded(t *testing.T, record string) []int {
	t.Helper()
	b, err := os.ReadFile(record)
	if err != nil {
		t.Fatalf("the fake engine was not run: %v", err)
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("bad PID %q in %s", f, record)
		}
		pids = append(pids, pid)
	}
	return pids
}

// running reports whether process pid exists and is not a zombie (an
// exited process that its new parent has not reaped yet).
func running(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// "pid (comm) state ...": comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// killRecorded kills what the fake engine recorded and is still running.
func killRecorded(record string) {
	b, _ := os.ReadFile(record)
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && running(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	time.Sleep(100 * time.Millisecond)
}

// TestEnginesStopLeavesOtherDirs: "engines.sh stop" deleted whatever
// directory a state file named (echo /some/dir > D/etcd.dir). It must
// remove only a directory of the kind start makes, and say what it left.
func TestEnginesStopLeavesOtherDirs(t *testing.T) {
	state := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.MkdirAll(filepath.Join(victim, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(victim, "keep"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// One made as start makes them: that one stop removes.
	made, err := exec.Command("mktemp", "-d", "/tmp/leasehold-redis.XXXXXX").Output()
	if err != nil {
		t.Fatal(err)
	}
	ours := strings.TrimSpace(string(made))
	defer os.RemoveAll(ours)
	// Every other directory named is the test's own: before the fix, stop
	// deleted them.
	victim2 := t.TempDir()
	for key, dir := range map[string]string{"etcd": victim, "pg": victim, "etcd-cluster": victim2, "redis": ours} {
		if err := os.WriteFile(filepath.Join(state, key+".dir"), []byte(dir+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, code := runScript(t, []string{"LEASEHOLD_ENGINES_DIR=" + state}, "engines.sh", "stop")
	if code != 0 {
		t.Errorf("engines.sh stop: exit %d, want 0:\n%s", code, out)
	}
	if _, err := os.Stat(victim2); err != nil {
		t.Errorf("engines.sh stop removed a directory it did not make (%v):\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(victim, "keep")); err != nil {
		t.Errorf("engines.sh stop removed a directory it did not make (%v):\n%s", err, out)
	}
	if !strings.Contains(out, "etcd.dir names '"+victim+"'") || !strings.Contains(out, "left alone") {
		t.Errorf("engines.sh stop does not say it left %s alone:\n%s", victim, out)
	}
	if _, err := os.Stat(ours); !os.IsNotExist(err) {
		t.Errorf("engines.sh stop left its own directory %s (%v):\n%s", ours, err, out)
	}
	if left, _ := filepath.Glob(filepath.Join(state, "*.dir")); len(left) > 0 {
		t.Errorf("state files left: %v", left)
	}
}

// TestEnginesClaimed: while another live test command has claimed an
// engines' directory, engines.sh start and stop, and test.sh, refuse it
// with exit 75 and change nothing; once that process is gone its claim is
// stale and stop goes ahead. Before, a second test command on one
// directory stopped the first one's engines (stop removed them here).
func TestEnginesClaimed(t *testing.T) {
	state := t.TempDir()
	other := exec.Command("sleep", "300") // the other test command
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer other.Process.Kill()
	claim := claimFor(t, state, other.Process.Pid)
	// An engine of the other command's, as start records one.
	made, err := exec.Command("mktemp", "-d", "/tmp/leasehold-redis.XXXXXX").Output()
	if err != nil {
		t.Fatal(err)
	}
	engine := strings.TrimSpace(string(made))
	defer os.RemoveAll(engine)
	if err := os.WriteFile(filepath.Join(state, "redis.dir"), []byte(engine+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	unchanged := func(what string) {
		t.Helper()
		if _, err := os.Stat(engine); err != nil {
			t.Errorf("%s removed the other command's engine directory: %v", what, err)
		}
		if b, err := os.ReadFile(filepath.Join(state, "claim")); err != nil || string(b) != claim {
			t.Errorf("%s changed the claim: %q, %v", what, b, err)
		}
		if names, _ := filepath.Glob(filepath.Join(state, "*.dir")); len(names) != 1 {
			t.Errorf("%s changed the state files: %v", what, names)
		}
	}
	env := []string{"LEASEHOLD_ENGINES_DIR=" + state, "LEASEHOLD_ENGINES_NO_INSTALL=1", "LEASEHOLD_ENGINES_CLAIM="}
	want := fmt.Sprintf("in use by another test command (process %d", other.Process.Pid)
	for _, args := range [][]string{{"stop"}, {"start"}} {
		out, code := runScript(t, env, "engines.sh", args...)
		if code != 75 || !strings.Contains(out, want) {
			t.Errorf("engines.sh %s on a claimed directory: exit %d, want 75 saying %q:\n%s", args[0], code, want, out)
		}
		unchanged("engines.sh " + args[0])
	}
	out, code := runScript(t, append(env, "LEASEHOLD_STAGES=engines"), "test.sh")
	if code != 75 || !strings.Contains(out, want) || !strings.Contains(out, "engines  FAILED") {
		t.Errorf("test.sh on a claimed directory: exit %d, want 75 saying %q, with its table:\n%s", code, want, out)
	}
	unchanged("test.sh")

	// The other command is gone: its claim is stale.
	other.Process.Kill()
	other.Wait()
	out, code = runScript(t, env, "engines.sh", "stop")
	if code != 0 {
		t.Errorf("engines.sh stop after the claimer ended: exit %d, want 0:\n%s", code, out)
	}
	if _, err := os.Stat(engine); !os.IsNotExist(err) {
		t.Errorf("engines.sh stop after the claimer ended left its engine directory (%v):\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(state, "claim")); !os.IsNotExist(err) {
		t.Errorf("engines.sh stop after the claimer ended left the stale claim (%v)", err)
	}
}

// TestEtcdMemberOnlyItsCluster: etcd-member acts only on a cluster
// directory of the kind start makes; a state file naming any other
// directory made it SIGKILL the process a pid file there named (one
// running in that directory passed its ownership check).
func TestEtcdMemberOnlyItsCluster(t *testing.T) {
	state, victim := t.TempDir(), t.TempDir()
	proc := exec.Command("sleep", "300")
	proc.Dir = victim
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	defer proc.Process.Kill()
	if err := os.WriteFile(filepath.Join(victim, "n1.pid"), []byte(strconv.Itoa(proc.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "etcd-cluster.dir"), []byte(victim+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := runScript(t, []string{"LEASEHOLD_ENGINES_DIR=" + state}, "engines.sh", "etcd-member", "kill", "1")
	if code != 1 || !strings.Contains(out, "not a directory engines.sh makes") {
		t.Errorf("etcd-member kill on a foreign directory: exit %d, want 1 saying it is not one of its own:\n%s", code, out)
	}
	if !running(proc.Process.Pid) {
		t.Errorf("etcd-member kill killed process %d of a directory it did not make:\n%s", proc.Process.Pid, out)
	}
}

// TestEnginesBadClaim: a LEASEHOLD_ENGINES_CLAIM that names no running
// process, or is not a process id at all, is a usage error (64) before
// anything is claimed or started. "self" passed before: /proc/self named
// the script's own helper, so start claimed the directory for a process
// id no check could match and started the engines.
func TestEnginesBadClaim(t *testing.T) {
	sleeper := exec.Command("sleep", "300") // alive, but not the script's caller
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleeper.Process.Kill(); sleeper.Wait() }()
	// "1" and a live process that does not run the script (the red team
	// of 2026-12-05: a claim for PID 1 locked the directory for good).
	for _, claim := range []string{"999999999", "abc", "self", "-1", "1 2", "1", strconv.Itoa(sleeper.Process.Pid)} {
		t.Run(claim, func(t *testing.T) {
			state := t.TempDir()
			t.Cleanup(func() {
				// Whatever a start that should have refused started.
				runScript(t, []string{"LEASEHOLD_ENGINES_DIR=" + state, "LEASEHOLD_ENGINES_CLAIM="}, "engines.sh", "stop")
			})
			out, code := runScript(t, []string{"LEASEHOLD_ENGINES_DIR=" + state, "LEASEHOLD_ENGINES_NO_INSTALL=1", "LEASEHOLD_ENGINES_CLAIM=" + claim},
				"engines.sh", "start")
			if code != 64 || !strings.Contains(out, "LEASEHOLD_ENGINES_CLAIM") {
				t.Errorf("engines.sh start with LEASEHOLD_ENGINES_CLAIM=%q: exit %d, want 64 naming the variable:\n%s", claim, code, out)
			}
			if names, _ := filepath.Glob(filepath.Join(state, "*")); len(names) != 0 {
				t.Errorf("engines.sh start with LEASEHOLD_ENGINES_CLAIM=%q left %v", claim, names)
			}
		})
	}
	// On a directory another live command holds, a bad claim is still a
	// usage error (the red team of 2026-12-06: it was refused with 75, as
	// a good one would be), and the other command's claim stays.
	for _, claim := range []string{"abc", "1"} {
		t.Run("claimed/"+claim, func(t *testing.T) {
			state := t.TempDir()
			held := claimFor(t, state, sleeper.Process.Pid)
			out, code := runScript(t, []string{"LEASEHOLD_ENGINES_DIR=" + state, "LEASEHOLD_ENGINES_NO_INSTALL=1", "LEASEHOLD_ENGINES_CLAIM=" + claim},
				"engines.sh", "start")
			if code != 64 || !strings.Contains(out, "LEASEHOLD_ENGINES_CLAIM") {
				t.Errorf("engines.sh start with LEASEHOLD_ENGINES_CLAIM=%q on a claimed directory: exit %d, want 64 naming the variable:\n%s", claim, code, out)
			}
			if b, err := os.ReadFile(filepath.Join(state, "claim")); err != nil || string(b) != held {
				t.Errorf("the other command's claim changed: %q (%v), want %q", b, err, held)
			}
		})
	}
	// stop checks the claim as start does (the re-check of 2026-12-06:
	// stop with the live claimer's own pid stopped its engines, rc 0).
	for _, claim := range []string{"abc", strconv.Itoa(sleeper.Process.Pid)} {
		t.Run("stop/"+claim, func(t *testing.T) {
			state := t.TempDir()
			held := claimFor(t, state, sleeper.Process.Pid)
			dir, proc := runningEngine(t, state, "redis")
			out, code := runScript(t, []string{"LEASEHOLD_ENGINES_DIR=" + state, "LEASEHOLD_ENGINES_CLAIM=" + claim}, "engines.sh", "stop")
			if code != 64 || !strings.Contains(out, "LEASEHOLD_ENGINES_CLAIM") {
				t.Errorf("engines.sh stop with LEASEHOLD_ENGINES_CLAIM=%q on a claimed directory: exit %d, want 64 naming the variable:\n%s", claim, code, out)
			}
			if _, err := os.Stat(dir); err != nil || syscall.Kill(proc.Process.Pid, 0) != nil {
				t.Errorf("engines.sh stop with a bad claim stopped the other command's engine or removed its directory (%v):\n%s", err, out)
			}
			if b, err := os.ReadFile(filepath.Join(state, "claim")); err != nil || string(b) != held {
				t.Errorf("the other command's claim changed: %q (%v), want %q", b, err, held)
			}
		})
	}
}

// claimFor writes state's claim for process pid, as a test command's
// engines.sh start does, and returns it.
func claimFor(t *testing.T, state string, pid int) string {
	t.Helper()
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	claim := fmt.Sprintf("%d %s\n", pid, fields[19]) // field 22: its start time
	if err := os.WriteFile(filepath.Join(state, "claim"), []byte(claim), 0o644); err != nil {
		t.Fatal(err)
	}
	return claim
}

// runningEngine makes a directory as start makes one for key, with a process
// running in it (a pid file naming it), and records it in state.
func runningEngine(t *testing.T, state, key string) (dir string, proc *exec.Cmd) {
	t.Helper()
	made, err := exec.Command("mktemp", "-d", "/tmp/leasehold-"+key+".XXXXXX").Output()
	if err != nil {
		t.Fatal(err)
	}
	dir = strings.TrimSpace(string(made))
	t.Cleanup(func() { os.RemoveAll(dir) })
	proc = exec.Command("sleep", "300")
	proc.Dir = dir
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proc.Process.Kill(); proc.Wait() })
	if err := os.WriteFile(filepath.Join(dir, "pid"), []byte(strconv.Itoa(proc.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, key+".dir"), []byte(dir+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, proc
}

// TestEnginesCopiedStateLeftAlone (the red team of 2026-12-05): a copy of a
// state directory (cp -a of a checkout copies its .engines) names the
// original's engines, and stop on the copy (which test.sh runs first)
// stopped them and deleted their data. The engines stay the original's:
// stop on the copy drops only the copy's state; stop on the original
// still stops them.
func TestEnginesCopiedStateLeftAlone(t *testing.T) {
	orig := t.TempDir()
	dir, proc := runningEngine(t, orig, "redis")
	if err := os.WriteFile(filepath.Join(orig, "home"), []byte(orig+"\n"), 0o644); err != nil { // as start records it
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), "copy")
	if out, err := exec.Command("cp", "-a", orig, cp).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v\n%s", err, out)
	}
	out, code := runScript(t, []string{"LEASEHOLD_ENGINES_DIR=" + cp, "LEASEHOLD_ENGINES_CLAIM="}, "engines.sh", "stop")
	if code != 0 {
		t.Errorf("engines.sh stop on the copy: exit %d:\n%s", code, out)
	}
	if _, err := os.Stat(dir); err != nil || proc.ProcessState != nil || syscall.Kill(proc.Process.Pid, 0) != nil {
		t.Fatalf("engines.sh stop on a copy of the state stopped the original's engine or deleted its directory (%v):\n%s", err, out)
	}
	if names, _ := filepath.Glob(filepath.Join(cp, "*.dir")); len(names) != 0 {
		t.Errorf("the copy still names engines: %v", names)
	}
	out, code = runScript(t, []string{"LEASEHOLD_ENGINES_DIR=" + orig, "LEASEHOLD_ENGINES_CLAIM="}, "engines.sh", "stop")
	if _, err := os.Stat(dir); code != 0 || !os.IsNotExist(err) {
		t.Errorf("engines.sh stop on the original: exit %d, its engine directory %v (want removed):\n%s", code, err, out)
	}
}

// TestEnginesStaleClaimRace (the red team of 2026-12-05): with a claim
// left by a killed run, two test commands started at once both dropped it
// and both went on (2 of 3 rounds), each stopping the other's engines.
// Six commands (each claiming for itself, then living on) start on such a
// directory at once, in several rounds: exactly one may go past the claim.
func TestEnginesStaleClaimRace(t *testing.T) {
	for round := 0; round < 4; round++ {
		state := t.TempDir()
		dead := exec.Command("true")
		if err := dead.Run(); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(state, "claim"), []byte(strconv.Itoa(dead.Process.Pid)+" 12345\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		const n = 6
		codes := make(chan int, n)
		var cmds []*exec.Cmd
		for range n {
			// Claims for its shell, which lives 3 s after the start ends.
			cmd := exec.Command("bash", "-c", `LEASEHOLD_ENGINES_CLAIM=$$ "$0" start >/dev/null 2>&1; st=$?; sleep 3; exit $st`, repoScript(t, "engines.sh"))
			cmd.Env = append(os.Environ(), "LEASEHOLD_ENGINES_DIR="+state, "LEASEHOLD_ENGINES_NO_INSTALL=1", "LEASEHOLD_NPM_DIR="+filepath.Join(state, "npm"))
			cmds = append(cmds, cmd)
		}
		for _, cmd := range cmds {
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
		}
		for _, cmd := range cmds {
			go func() {
				err := cmd.Wait()
				code := 0
				if ee, ok := err.(*exec.ExitError); ok {
					code = ee.ExitCode()
				}
				codes <- code
			}()
		}
		past := 0
		var all []int
		for range n {
			c := <-codes
			all = append(all, c)
			if c != 75 {
				past++ // went past the claim (and failed later: nothing installed)
			}
		}
		runScript(t, []string{"LEASEHOLD_ENGINES_DIR=" + state, "LEASEHOLD_ENGINES_CLAIM="}, "engines.sh", "stop")
		if past != 1 {
			t.Fatalf("round %d: %d of %d starts went past a stale claim at once (exit codes %v), want 1 (the others 75)", round, past, n, all)
		}
	}
}

// TestEnginesStopStalePostmasterPid (the red team of 2026-12-06): after a
// PostgreSQL server died (killed, or out of memory), engines.sh stop took
// the pid in its stale postmaster.pid and killed whatever process had it
// since (here another process of this test, standing in for a reused
// pid). Only a process that is still the server started in that directory
// may be stopped; one that is gets stopped as before.
func TestEnginesStopStalePostmasterPid(t *testing.T) {
	// A stand-in for the server: a program named postgres (its process
	// name) whose command line names the directory, as the real one's does.
	fakePostgres := filepath.Join(t.TempDir(), "postgres")
	if err := os.WriteFile(fakePostgres, []byte("#!/bin/sh\nwhile :; do sleep 1; done\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		owned bool // the process is the server started in the directory
	}{
		{"reused pid", false},
		// The re-check of 2026-12-06: a "tail -f" of the server's log, a
		// psql on its socket directory, a shell in its directory were
		// taken for the server (they name the directory too).
		{"names the directory", false},
		{"in the directory", false},
		{"the server", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			made, err := exec.Command("mktemp", "-d", "/tmp/leasehold-pg.XXXXXX").Output()
			if err != nil {
				t.Fatal(err)
			}
			dir := strings.TrimSpace(string(made))
			t.Cleanup(func() { os.RemoveAll(dir) })
			if err := os.Mkdir(filepath.Join(dir, "data"), 0o700); err != nil {
				t.Fatal(err)
			}
			proc := exec.Command("sleep", "300")
			proc.Dir = t.TempDir()
			switch tc.name {
			case "names the directory":
				proc = exec.Command("sh", "-c", "while :; do sleep 1; done", filepath.Join(dir, "server.log"))
				proc.Dir = t.TempDir()
			case "in the directory":
				proc.Dir = dir
			case "the server":
				proc = exec.Command(fakePostgres, "-D", filepath.Join(dir, "data"))
				proc.Dir = filepath.Join(dir, "data")
			}
			if err := proc.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() { proc.Wait(); close(done) }()
			t.Cleanup(func() { proc.Process.Kill(); <-done })
			pidFile := strconv.Itoa(proc.Process.Pid) + "\n" + filepath.Join(dir, "data") + "\n"
			if err := os.WriteFile(filepath.Join(dir, "data", "postmaster.pid"), []byte(pidFile), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(state, "pg.dir"), []byte(dir+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			out, code := runScript(t, []string{"LEASEHOLD_ENGINES_DIR=" + state, "LEASEHOLD_ENGINES_CLAIM="}, "engines.sh", "stop")
			if code != 0 {
				t.Errorf("engines.sh stop: exit %d, want 0:\n%s", code, out)
			}
			var stopped bool
			select {
			case <-done:
				stopped = true
			case <-time.After(500 * time.Millisecond):
			}
			if stopped != tc.owned {
				t.Errorf("process %d (%s) stopped: %v, want %v:\n%s", proc.Process.Pid, tc.name, stopped, tc.owned, out)
			}
			if !tc.owned && !strings.Contains(out, "left alone") {
				t.Errorf("engines.sh stop does not say it left process %d alone:\n%s", proc.Process.Pid, out)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("engines.sh stop left the engine's directory %s (%v)", dir, err)
			}
			if _, err := os.Stat(filepath.Join(state, "pg.dir")); !os.IsNotExist(err) {
				t.Errorf("engines.sh stop left its state file pg.dir (%v)", err)
			}
		})
	}
}

// TestEnginesZombieClaimer (the red team of 2026-12-06, round 3): a claim
// whose process had been killed but not yet waited for by its parent (a
// zombie) was taken as live: stop refused with 75, and a flake hunt's
// watchdog, which runs then, left every engine running. A zombie's claim
// is stale. A claim.PID file left by a writer killed before its rename is
// removed too.
func TestEnginesZombieClaimer(t *testing.T) {
	state := t.TempDir()
	claimer := exec.Command("sleep", "300")
	if err := claimer.Start(); err != nil {
		t.Fatal(err)
	}
	claimFor(t, state, claimer.Process.Pid)
	if err := claimer.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	defer claimer.Wait()
	// Not waited for: a zombie until the deferred Wait.
	for deadline := time.Now().Add(30 * time.Second); procState(claimer.Process.Pid) != "Z"; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d is not a zombie after 30 s (state %q)", claimer.Process.Pid, procState(claimer.Process.Pid))
		}
	}
	leftover := filepath.Join(state, "claim.999999")
	if err := os.WriteFile(leftover, []byte("1 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir, _ := runningEngine(t, state, "redis")
	out, code := runScript(t, []string{"LEASEHOLD_ENGINES_DIR=" + state, "LEASEHOLD_ENGINES_CLAIM="}, "engines.sh", "stop")
	if code != 0 {
		t.Fatalf("engines.sh stop with a zombie's claim: exit %d, want 0:\n%s", code, out)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the engine's directory is left (%v):\n%s", err, out)
	}
	for _, f := range []string{filepath.Join(state, "claim"), leftover} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("%s left (%v)", f, err)
		}
	}
}
