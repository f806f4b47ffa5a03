package cli

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/sqlite"
	"github.com/leasehold/leasehold/stores"
	"github.com/leasehold/leasehold/testrig/proctest"
)

// result is the outcome of one command.
type result struct {
	code           int
	stdout, stderr string
}

// harness runs commands in-process with a store opener tests can override.
type harness struct {
	t    *testing.T
	path string // the SQLite file of the default test store
	url  string
	open func(ctx context.Context, url string) (leasehold.Store, error)
	// openExisting is the opener of status and release.
	openExisting func(ctx context.Context, url string) (leasehold.Store, error)
	clock        *clock.Fake // withFakeClock; nil: real time
}

func newHarness(t *testing.T) *harness {
	proctest.MarkTrees(t)
	path := filepath.Join(t.TempDir(), "leases.db")
	return &harness{t: t, path: path, url: "sqlite://" + path, open: stores.Open, openExisting: stores.OpenExisting}
}

// start runs the command in a goroutine; the stderr buffer can be watched
// while it runs.
func (h *harness) start(args ...string) (stderr *proctest.Buffer, done <-chan result) {
	_, stderr, done = h.startWatched(args...)
	return stderr, done
}

// startWatched is start with the stdout buffer as well, for a test that
// waits for what the command prints there (hold's "holding ...").
func (h *harness) startWatched(args ...string) (stdout, stderr *proctest.Buffer, done <-chan result) {
	var out, errb proctest.Buffer
	ch := make(chan result, 1)
	e := &env{stdout: &out, stderr: &errb, open: h.open, openExisting: h.openExisting}
	if h.clock != nil {
		e.clock = h.clock
	}
	go func() {
		code := e.main(context.Background(), args)
		ch <- result{code, out.String(), errb.String()}
	}()
	return &out, &errb, ch
}

// run runs the command and waits up to a generous limit for it.
func (h *harness) run(args ...string) result {
	h.t.Helper()
	_, done := h.start(args...)
	return h.await(done, args...)
}

// await waits up to a generous limit for the command started with args
// whose result comes on done, and fails the test (with its output so far)
// if it does not finish: the command runs with a context that never ends,
// so a bare receive waited as long as the command, for ever for one
// that never returns.
func (h *harness) await(done <-chan result, args ...string) result {
	h.t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(60 * time.Second):
		h.t.Fatalf("leasehold %q did not finish within 60s", args)
		return result{}
	}
}

// store opens the test store directly.
func (h *harness) store() *sqlite.Store {
	h.t.Helper()
	s, err := sqlite.Open(h.path)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { s.Close() })
	return s
}

// create makes the test store's file, for the commands that read a store
// but never create one (status, release).
func (h *harness) create() {
	h.t.Helper()
	h.store()
}

// hold takes name in the test store for owner and keeps it until the test
// ends.
func (h *harness) hold(name, owner string, opts ...leasehold.AcquireOption) *leasehold.Lease {
	h.t.Helper()
	c, err := leasehold.New(h.store(), leasehold.WithOwner(owner))
	if err != nil {
		h.t.Fatal(err)
	}
	l, err := c.TryAcquire(context.Background(), name, append([]leasehold.AcquireOption{leasehold.TTL(time.Minute)}, opts...)...)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = l.Release(context.Background()) })
	return l
}

func TestUsageErrors(t *testing.T) {
	h := newHarness(t)
	ctrl := "bad\x01name"
	cases := map[string][]string{
		"ttl too short":       {"run", "--store", h.url, "--ttl", "1ms", "a", "--", "true"},
		"ttl too long":        {"run", "--store", h.url, "--ttl", "48h", "a", "--", "true"},
		"grace zero":          {"run", "--store", h.url, "--grace", "0s", "a", "--", "true"},
		"grace negative":      {"run", "--store", h.url, "--grace", "-1s", "a", "--", "true"},
		"grace too long":      {"run", "--store", h.url, "--ttl", "3s", "--grace", "2s", "a", "--", "true"},
		"missing dash":        {"run", "--store", h.url, "a", "true"},
		"missing command":     {"run", "--store", h.url, "a", "--"},
		"missing name":        {"run", "--store", h.url, "--", "true"},
		"no arguments":        {"run", "--store", h.url},
		"two names":           {"run", "--store", h.url, "a", "b", "--", "true"},
		"control char name":   {"run", "--store", h.url, ctrl, "--", "true"},
		"empty owner":         {"run", "--store", h.url, "--owner", "", "a", "--", "true"},
		"negative wait":       {"run", "--store", h.url, "--wait", "-1s", "a", "--", "true"},
		"unknown flag":        {"run", "--store", h.url, "--bogus", "a", "--", "true"},
		"bad duration":        {"run", "--store", h.url, "--ttl", "soon", "a", "--", "true"},
		"bad store scheme":    {"run", "--store", "nosuch://x", "a", "--", "true"},
		"status bad prefix":   {"status", "--store", h.url, ctrl},
		"status two args":     {"status", "--store", h.url, "a", "b"},
		"demo zero rounds":    {"demo", "--store", h.url, "--rounds", "0"},
		"demo zero workers":   {"demo", "--store", h.url, "--workers", "0"},
		"unknown command":     {"bogus"},
		"no command":          {},
		"version with args":   {"version", "x"},
		"data too large":      {"run", "--store", h.url, "--data", strings.Repeat("x", leasehold.MaxDataLen+1), "a", "--", "true"},
		"status unknown flag": {"status", "--bogus"},
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			h := *h
			h.t = t
			r := h.run(args...)
			if r.code != ExitUsage {
				t.Errorf("exit code %d, want %d; stderr:\n%s", r.code, ExitUsage, r.stderr)
			}
			if lines := strings.Count(r.stderr, "leasehold: "); lines != 1 {
				t.Errorf("want one error line on stderr, got:\n%s", r.stderr)
			}
		})
	}
	if _, err := os.Stat(h.path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("usage errors touched the store file: stat: %v", err)
	}
}

func TestCommandNotFound(t *testing.T) {
	h := newHarness(t)
	r := h.run("run", "--store", h.url, "a", "--", "/nonexistent/leasehold-test-cmd")
	if r.code != ExitNotFound {
		t.Errorf("exit code %d, want %d; stderr:\n%s", r.code, ExitNotFound, r.stderr)
	}
	if _, err := os.Stat(h.path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("store file created for a command that does not exist: %v", err)
	}
}

func TestStatus(t *testing.T) {
	h := newHarness(t)
	h.create()

	r := h.run("status", "--store", h.url)
	if r.code != 0 || strings.TrimSpace(r.stdout) != "no leases" {
		t.Fatalf("empty status: code %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = h.run("status", "--json", "--store", h.url)
	if r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
		t.Fatalf("empty status --json: code %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}

	l := h.hold("jobs/report", "tester", leasehold.Data([]byte("payload")))
	h.hold("other/x", "someone")

	r = h.run("status", "--store", h.url, "jobs/")
	if r.code != 0 {
		t.Fatalf("status: code %d, stderr %q", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 {
		t.Fatalf("status: want a header and one row, got:\n%s", r.stdout)
	}
	if got := strings.Fields(lines[0]); strings.Join(got, " ") != "NAME OWNER TOKEN ACQUIRED REMAINING" {
		t.Errorf("header %q", lines[0])
	}
	row := strings.Fields(lines[1])
	if len(row) != 6 || row[0] != "jobs/report" || row[1] != "tester" || row[2] != "1" {
		t.Errorf("row %q", lines[1])
	}

	r = h.run("status", "--json", "--store", h.url, "jobs/")
	if r.code != 0 {
		t.Fatalf("status --json: code %d, stderr %q", r.code, r.stderr)
	}
	var got []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	if len(got) != 1 {
		t.Fatalf("status --json: want one lease, got %d:\n%s", len(got), r.stdout)
	}
	g := got[0]
	if g["name"] != "jobs/report" || g["owner"] != "tester" || g["token"] != float64(l.Token()) ||
		g["data"] != "payload" || g["ttl_ms"] != float64(60000) {
		t.Errorf("status --json: %v", g)
	}
	if rem, _ := g["remaining_ms"].(float64); rem <= 0 || rem > 60000 {
		t.Errorf("remaining_ms %v", g["remaining_ms"])
	}
	acq, _ := g["acquired"].(string)
	if at, err := time.Parse(time.RFC3339Nano, acq); err != nil || !at.Equal(l.Acquired()) {
		t.Errorf("acquired %q (%v), want %v", acq, err, l.Acquired())
	}

	r = h.run("status", "--json", "--store", h.url)
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || len(got) != 2 {
		t.Errorf("status --json without prefix: %v, %d leases:\n%s", err, len(got), r.stdout)
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		r := newHarness(t).run(args...)
		if r.code != 0 || r.stdout != "leasehold "+versionLine()+"\n" {
			t.Errorf("%s: code %d, stdout %q", args[0], r.code, r.stdout)
		}
		// Built by "go test", the binary has no VCS stamp: the fields say
		// so instead of being left empty.
		if !strings.HasPrefix(r.stdout, "leasehold "+version()+" (commit ") || !strings.Contains(r.stdout, ", dated ") {
			t.Errorf("%s: %q lacks the version, commit or date", args[0], r.stdout)
		}
	}
}

func TestHelpListsExitCodes(t *testing.T) {
	r := newHarness(t).run("run", "--help")
	if r.code != 0 {
		t.Fatalf("run --help: code %d", r.code)
	}
	for _, want := range []string{"64", "70", "75", "76", "LEASEHOLD_TOKEN", "Examples:"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("run --help does not mention %q", want)
		}
	}
}

func TestDemo(t *testing.T) {
	for _, store := range []string{"", "memory://"} {
		t.Run("store="+store, func(t *testing.T) {
			args := []string{"demo", "--rounds", "2", "--workers", "3"}
			if store != "" {
				args = append(args, "--store", store)
			}
			r := newHarness(t).run(args...)
			if r.code != 0 {
				t.Fatalf("demo: code %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
			}
			if n := strings.Count(r.stdout, " holds demo/job with token "); n != 6 {
				t.Errorf("demo: %d turns, want 6:\n%s", n, r.stdout)
			}
			for _, want := range []string{"worker-1 holds", "worker-3 holds", "strictly increasing", "No overlap"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("demo output lacks %q:\n%s", want, r.stdout)
				}
			}
		})
	}
}

func TestStatusLine(t *testing.T) {
	h := &leasehold.HeldError{Name: "n", Owner: "o", Token: 7, Remaining: 12400 * time.Millisecond,
		Acquired: time.Date(2024, 1, 2, 3, 4, 5, 0, time.Local)}
	got := statusLine("n", h, 400*time.Millisecond)
	want := "waiting for n (held by o, token 7, since 03:04:05, expires in 12s)"
	if got != want {
		t.Errorf("statusLine = %q, want %q", got, want)
	}
	if got := truncate("héllo world", 6); got != "héllo" {
		t.Errorf("truncate = %q", got)
	}
	if got := truncate("hello", 0); got != "hello" {
		t.Errorf("truncate with unknown width = %q", got)
	}
}

// TestUsageNamesSubcommandHelp (issue 29, item 6): a usage error ends with
// the help of the command that refused it, not always the top level's.
func TestUsageNamesSubcommandHelp(t *testing.T) {
	h := newHarness(t)
	for _, c := range []struct {
		args []string
		help string
	}{
		{[]string{"run", "--bogus", "a", "--", "true"}, "leasehold run"},
		{[]string{"run", "--store", h.url, "a"}, "leasehold run"},
		{[]string{"hold", "--ttl", "soon", "a"}, "leasehold hold"},
		{[]string{"status", "a", "b"}, "leasehold status"},
		{[]string{"store", "init", "--bogus"}, "leasehold store init"},
		{[]string{"release", "a"}, "leasehold release"},
		{[]string{"bogus"}, "leasehold"},
		{[]string{"--bogus"}, "leasehold"},
	} {
		r := h.run(c.args...)
		want := "Run '" + c.help + " --help' for usage.\n"
		if r.code != ExitUsage || !strings.HasSuffix(r.stderr, want) {
			t.Errorf("%q: exit %d, stderr %q; want %d ending %q", c.args, r.code, r.stderr, ExitUsage, want)
		}
	}
}

// TestRunDashName (issue 29, item 6): a NAME that starts with "-" is given
// between two "--"; it was refused ("missing NAME before --").
func TestRunDashName(t *testing.T) {
	h := newHarness(t)
	r := h.run("run", "--store", h.url, "--", "-dash", "--", "sh", "-c", `echo "$LEASEHOLD_NAME"`)
	if r.code != 0 || r.stdout != "-dash\n" {
		t.Fatalf("run -- -dash -- CMD: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	for _, bad := range [][]string{
		{"--", "-dash", "--"},
		{"--", "-a", "-b", "--", "true"},
		{"--", "--", "true"},
		{"--", "true"},
	} {
		if r := h.run(append([]string{"run", "--store", h.url}, bad...)...); r.code != ExitUsage {
			t.Errorf("run %q: exit %d, want %d; stderr %q", bad, r.code, ExitUsage, r.stderr)
		}
	}
	if r := h.run("release", "--store", h.url, "--owner", "o", "--token", "1", "--", "-dash"); r.code != ExitLost || !strings.Contains(r.stderr, "-dash is not held") {
		t.Errorf("release -- -dash: exit %d, stderr %q", r.code, r.stderr)
	}
	recs, err := h.store().List(t.Context(), "")
	if err != nil || len(recs) != 0 {
		t.Errorf("after the runs: %v, %+v; want no leases", err, recs)
	}
}

// TestReadOnlyCommandsCreateNoStore (issue 29, item 4): status, release and
// force-release on a SQLite store that does not exist create nothing (no
// directory, no file): named by --store or $LEASEHOLD_STORE it is a usage
// error that names the file (status printed "no leases" and created
// both); the default file, before any run or hold made it, is an empty
// store.
func TestReadOnlyCommandsCreateNoStore(t *testing.T) {
	h := newHarness(t)
	dir := t.TempDir()
	typo := filepath.Join(dir, "typo", "leses.db")
	t.Setenv("XDG_DATA_HOME", filepath.Join(dir, "xdg"))
	t.Setenv(stores.EnvStore, "")
	for _, args := range [][]string{
		{"status", "--store", "sqlite://" + typo},
		{"status", "--json", "--store", "sqlite://" + typo},
		{"release", "--owner", "o", "--token", "1", "--store", "sqlite://" + typo, "a"},
		{"force-release", "--yes", "--store", "sqlite://" + typo, "a"},
	} {
		r := h.run(args...)
		if r.code != ExitUsage || !strings.Contains(r.stderr, "no SQLite store at "+typo+": the file does not exist (nothing was created)") {
			t.Errorf("%q: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
	t.Setenv(stores.EnvStore, "sqlite://"+typo)
	if r := h.run("status"); r.code != ExitUsage || !strings.Contains(r.stderr, "$LEASEHOLD_STORE=sqlite://"+typo) {
		t.Errorf("status with $LEASEHOLD_STORE naming a missing file: exit %d, stderr %q", r.code, r.stderr)
	}
	t.Setenv(stores.EnvStore, "")
	if r := h.run("status"); r.code != 0 || r.stdout != "no leases\n" {
		t.Errorf("status on the default store, not made yet: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := h.run("status", "--json"); r.code != 0 || r.stdout != "[]\n" {
		t.Errorf("status --json on the default store, not made yet: exit %d, stdout %q", r.code, r.stdout)
	}
	if r := h.run("release", "--owner", "o", "--token", "1", "a"); r.code != ExitLost {
		t.Errorf("release on the default store, not made yet: exit %d, stderr %q", r.code, r.stderr)
	}
	for _, p := range []string{filepath.Join(dir, "typo"), filepath.Join(dir, "xdg")} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s was created: %v", p, err)
		}
	}
	// run creates the default store; status then reads it.
	if r := h.run("run", "a", "--", "true"); r.code != 0 {
		t.Fatalf("run on the default store: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := h.run("status"); r.code != 0 || r.stdout != "no leases\n" {
		t.Errorf("status after run: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}
