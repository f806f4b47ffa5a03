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
}

func newHarness(t *testing.T) *harness {
	proctest.MarkTrees(t)
	path := filepath.Join(t.TempDir(), "leases.db")
	return &harness{t: t, path: path, url: "sqlite://" + path, open: stores.Open}
}

// start runs the command in a goroutine; the stderr buffer can be watched
// while it runs.
func (h *harness) start(args ...string) (stderr *proctest.Buffer, done <-chan result) {
	var out, errb proctest.Buffer
	ch := make(chan result, 1)
	e := &env{stdout: &out, stderr: &errb, open: h.open}
	go func() {
		code := e.main(context.Background(), args)
		ch <- result{code, out.String(), errb.String()}
	}()
	return &errb, ch
}

// run runs the command and waits up to a generous limit for it.
func (h *harness) run(args ...string) result {
	h.t.Helper()
	_, done := h.start(args...)
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
		"wait and no-wait":    {"run", "--store", h.url, "--wait", "1s", "--no-wait", "a", "--", "true"},
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
