package enginetest_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/testrig/enginetest"
	"github.com/leasehold/leasehold/testrig/proctest"
)

// childEnv, set, makes TestChild run the cases: it runs in a copy of this
// test binary started by TestMissingEngine.
const childEnv = "ENGINETEST_CHILD"

// childCases are tests that need an engine that their environment lacks,
// and the name of the engine that their message must give.
var childCases = append(sharedCases(), []childCase{
	// PATH is empty in the child: no program is found.
	{"redis-server", "redis-server", func(t *testing.T) { enginetest.StartRedis(t) }},
	{"etcd-server", "etcd", func(t *testing.T) { enginetest.StartEtcd(t) }},
	{"dynalite", "dynalite", func(t *testing.T) { enginetest.StartDynalite(t) }},
	// A test that goes on without its engine unless engines are required.
	{"partial", "PostgreSQL", func(t *testing.T) { enginetest.Partial(t, "PostgreSQL", "$LEASEHOLD_TEST_POSTGRES is empty") }},
	// A capability of the machine (not an engine the scripts start).
	{"capability", "root", func(t *testing.T) { enginetest.Unavailable(t, "root", "the test runs as uid 1000") }},
}...)

type childCase struct {
	name, engine string
	f            func(t *testing.T)
}

// sharedCases are the shared test servers of enginetest.Engines, each
// missing from the child's environment.
func sharedCases() []childCase {
	var cs []childCase
	for _, e := range enginetest.Engines {
		if e.URLVar != "" {
			cs = append(cs, childCase{e.Store, e.Title, func(t *testing.T) { enginetest.SharedURL(t, e.Store) }})
		}
	}
	return cs
}

// TestChild is run by TestMissingEngine only.
func TestChild(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Skip("run by TestMissingEngine")
	}
	for _, c := range childCases {
		t.Run(c.name, func(t *testing.T) {
			c.f(t)
			t.Log("REACHED THE END")
		})
	}
}

// TestMissingEngine runs tests whose engine is not configured in a copy
// of this test binary: they skip (or, with Partial, go on), saying how to
// start the engines, unless engines are required (CI=true,
// LEASEHOLD_REQUIRE_ENGINES=1), where they fail, naming the engine.
// LEASEHOLD_REQUIRE_ENGINES decides over CI; a value that is not a boolean
// fails the test, saying so.
func TestMissingEngine(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	drop := []string{"CI", "LEASEHOLD_REQUIRE_ENGINES", "PATH"}
	for _, e := range enginetest.Engines {
		if e.Kind == enginetest.External && e.Store != "postgres" { // PostgreSQL's programs are found without PATH
			drop = append(drop, e.URLVar, e.BinVar)
		} else if e.URLVar != "" {
			drop = append(drop, e.URLVar)
		}
	}
	base := proctest.EnvWithout(drop...)
	base = append(base, "PATH=", childEnv+"=1")
	for _, env := range []struct {
		vars   []string
		fail   bool
		saying string // what the message of a failure must also say
	}{
		{nil, false, ""},
		{[]string{"CI=true"}, true, "CI=true"},
		{[]string{"CI=1"}, true, "CI=1"},
		{[]string{"CI=false"}, false, ""},
		{[]string{"LEASEHOLD_REQUIRE_ENGINES=1"}, true, "LEASEHOLD_REQUIRE_ENGINES=1"},
		{[]string{"CI=true", "LEASEHOLD_REQUIRE_ENGINES=0"}, false, ""},
		{[]string{"LEASEHOLD_REQUIRE_ENGINES=yes"}, true, `LEASEHOLD_REQUIRE_ENGINES="yes" is not`},
	} {
		cmd := exec.Command(exe, "-test.run=^TestChild$", "-test.v", "-test.count=1")
		cmd.Env = append(append([]string(nil), base...), env.vars...)
		out, _ := cmd.CombinedOutput()
		logs, results := childOutput(string(out))
		for _, c := range childCases {
			what := strings.Join(env.vars, " ") + " " + c.name
			want := "SKIP" // how the case must end
			switch {
			case env.fail:
				want = "FAIL"
			case c.name == "partial":
				want = "PASS"
			}
			if results[c.name] != want {
				t.Errorf("%s: ended %q, want %s:\n%s", what, results[c.name], want, out)
				continue
			}
			got := logs[c.name]
			if reached := strings.Contains(got, "REACHED THE END"); reached != (want == "PASS") {
				t.Errorf("%s: the test went on without its engine: %v:\n%s", what, reached, got)
			}
			for _, w := range []string{c.engine, "scripts/engines.sh start", env.saying} {
				if w == "scripts/engines.sh start" && c.name == "capability" {
					continue // the scripts cannot provide it
				}
				if !strings.Contains(got, w) {
					t.Errorf("%s: the message does not say %q:\n%s", what, w, got)
				}
			}
		}
	}
}

// childOutput reads the output of TestChild's "go test -v": what each
// subtest logged, and how it ended (PASS, FAIL or SKIP).
func childOutput(out string) (logs, results map[string]string) {
	logs, results = make(map[string]string), make(map[string]string)
	name := ""
	for _, line := range strings.Split(out, "\n") {
		trimmed := strings.TrimSpace(line)
		if n, ok := strings.CutPrefix(trimmed, "=== RUN   TestChild/"); ok {
			name = n
			continue
		}
		if r, ok := strings.CutPrefix(trimmed, "--- "); ok {
			name = ""
			result, rest, _ := strings.Cut(r, ": TestChild/")
			if n, _, ok := strings.Cut(rest, " "); ok {
				results[n] = result
			}
			continue
		}
		if name != "" {
			logs[name] += line + "\n"
		}
	}
	return logs, results
}
