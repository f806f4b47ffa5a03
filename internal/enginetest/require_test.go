package enginetest_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/enginetest"
)

// childCase names the case TestChild runs, in a copy of this test binary
// started by TestMissingEngine.
const childCase = "ENGINETEST_CHILD_CASE"

// childCases are tests that need an engine that their environment lacks.
var childCases = map[string]func(t *testing.T){
	"postgres": func(t *testing.T) { enginetest.PostgresURL(t) },
	"redis":    func(t *testing.T) { enginetest.RedisURL(t) },
	"dynamodb": func(t *testing.T) { enginetest.DynamoDBURL(t) },
	"etcd":     func(t *testing.T) { enginetest.EtcdURL(t) },
	// PATH is empty in the child: no program is found.
	"redis-server": func(t *testing.T) { enginetest.StartRedis(t) },
	"etcd-server":  func(t *testing.T) { enginetest.StartEtcd(t) },
	"dynalite":     func(t *testing.T) { enginetest.StartDynalite(t) },
	// A test that goes on without its engine unless engines are required.
	"partial": func(t *testing.T) { enginetest.Partial(t, "PostgreSQL", "$LEASEHOLD_TEST_POSTGRES is empty") },
}

// TestChild is run by TestMissingEngine only.
func TestChild(t *testing.T) {
	name := os.Getenv(childCase)
	if name == "" {
		t.Skip("run by TestMissingEngine")
	}
	f := childCases[name]
	if f == nil {
		t.Fatalf("no child case %q", name)
	}
	f(t)
	t.Log("REACHED THE END")
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
	base := environWithout("CI", "LEASEHOLD_REQUIRE_ENGINES", "PATH",
		"LEASEHOLD_TEST_POSTGRES", "LEASEHOLD_TEST_REDIS", "LEASEHOLD_TEST_DYNAMODB", "LEASEHOLD_TEST_ETCD",
		"LEASEHOLD_TEST_REDIS_SERVER", "LEASEHOLD_TEST_ETCD_BIN", "LEASEHOLD_TEST_DYNALITE")
	base = append(base, "PATH=")
	engines := map[string]string{ // the name each case's message must give
		"postgres": "PostgreSQL", "redis": "Redis", "dynamodb": "DynamoDB", "etcd": "etcd",
		"redis-server": "redis-server", "etcd-server": "etcd", "dynalite": "dynalite", "partial": "PostgreSQL",
	}
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
		for name, engine := range engines {
			cmd := exec.Command(exe, "-test.run=^TestChild$", "-test.v", "-test.count=1")
			cmd.Env = append(append(append([]string(nil), base...), env.vars...), childCase+"="+name)
			out, err := cmd.CombinedOutput()
			got := string(out)
			what := strings.Join(env.vars, " ") + " " + name
			if partial := name == "partial"; strings.Contains(got, "REACHED THE END") != (partial && !env.fail) {
				t.Errorf("%s: the test went on without its engine: %v, want %v:\n%s", what, !partial || env.fail, partial && !env.fail, got)
				continue
			}
			if name == "partial" && !env.fail {
				if err != nil || !strings.Contains(got, "--- PASS: TestChild") {
					t.Errorf("%s: want the test to pass without its engine (err %v):\n%s", what, err, got)
					continue
				}
			} else if env.fail {
				if err == nil || !strings.Contains(got, "--- FAIL: TestChild") {
					t.Errorf("%s: want the test to fail (err %v):\n%s", what, err, got)
					continue
				}
			} else if err != nil || !strings.Contains(got, "--- SKIP: TestChild") {
				t.Errorf("%s: want the test to skip (err %v):\n%s", what, err, got)
				continue
			}
			for _, want := range []string{engine, "scripts/engines.sh start", env.saying} {
				if !strings.Contains(got, want) {
					t.Errorf("%s: the message does not say %q:\n%s", what, want, got)
				}
			}
		}
	}
}

// environWithout returns the environment without the named variables.
func environWithout(names ...string) []string {
	var env []string
next:
	for _, kv := range os.Environ() {
		for _, n := range names {
			if strings.HasPrefix(kv, n+"=") {
				continue next
			}
		}
		env = append(env, kv)
	}
	return env
}
