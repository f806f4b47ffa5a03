package cli

import (
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/randid"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

func TestStoreInit(t *testing.T) {
	h := newHarness(t)
	r := h.run("store", "init", "--store", h.url)
	if r.code != ExitOK {
		t.Fatalf("store init: exit %d, stderr %q", r.code, r.stderr)
	}
	if _, err := os.Stat(h.path); err != nil {
		t.Fatalf("store init did not create the file: %v", err)
	}
	if r := h.run("store", "init", "--store", h.url); r.code != ExitOK {
		t.Fatalf("second store init: exit %d, stderr %q", r.code, r.stderr)
	}
	for _, bad := range []string{"nosuch://x", "sqlite:///x.db?mode=ro"} {
		if r := h.run("store", "init", "--store", bad); r.code != ExitUsage {
			t.Errorf("store init --store %s: exit %d, want %d (stderr %q)", bad, r.code, ExitUsage, r.stderr)
		}
	}
	if r := h.run("store"); r.code != ExitUsage {
		t.Errorf("store without subcommand: exit %d", r.code)
	}
}

func TestElectAndPermitsUsageErrors(t *testing.T) {
	h := newHarness(t)
	for _, args := range [][]string{
		{"elect", "--store", h.url, "--on-lost", "sometimes", "svc", "--", "true"},
		{"elect", "--store", h.url, "svc"},
		{"elect", "--store", h.url, "--ttl", "1ms", "svc", "--", "true"},
		{"run", "--store", h.url, "--permits", "0", "pool", "--", "true"},
		{"run", "--store", h.url, "--permits", "5000", "pool", "--", "true"},
	} {
		if r := h.run(args...); r.code != ExitUsage {
			t.Errorf("%v: exit %d, want %d (stderr %q)", args, r.code, ExitUsage, r.stderr)
		}
	}
	if _, err := os.Stat(h.path); err == nil {
		t.Error("a usage error created the store file")
	}
}

func TestRunPermitsNoWait(t *testing.T) {
	h := newHarness(t)
	a := h.run("run", "--store", h.url, "--permits", "1", "pool", "--", "true")
	if a.code != ExitOK {
		t.Fatalf("first run: exit %d %q", a.code, a.stderr)
	}
	sem := h.hold("pool/permit/0", "someone")
	defer sem.Release(t.Context())
	r := h.run("run", "--store", h.url, "--permits", "1", "--no-wait", "pool", "--", "true")
	if r.code != ExitNotAcquired {
		t.Fatalf("all permits held, --no-wait: exit %d, want %d (stderr %q)", r.code, ExitNotAcquired, r.stderr)
	}
}

func TestSfnCommand(t *testing.T) {
	h := newHarness(t)
	r := h.run("sfn", "--table", "leasehold", "--lock", "nightly", "--lambda", "arn:aws:lambda:eu-west-1:123456789012:function:f", "--lambda-timeout", "1m")
	if r.code != ExitOK || !strings.Contains(r.stdout, `"QueryLanguage": "JSONata"`) {
		t.Fatalf("sfn: exit %d, stdout %.200q, stderr %q", r.code, r.stdout, r.stderr)
	}
	for _, args := range [][]string{
		{"sfn", "--table", "leasehold", "--lock", "nightly"},
		{"sfn", "--table", "x", "--lock", "nightly", "--lambda", "arn:aws:lambda:eu-west-1:123456789012:function:f"},
		{"sfn", "--table", "leasehold", "--lock", "nightly", "--task", "/nonexistent.json"},
	} {
		if r := h.run(args...); r.code != ExitUsage {
			t.Errorf("%v: exit %d, want %d", args, r.code, ExitUsage)
		}
	}
}

// TestStoreInitReadOnlyHint (red team of issue 31, item 8): "store init"
// against a read-only PostgreSQL (here a session that defaults to
// read-only, which answers SQLSTATE 25006 as a replica does) printed the
// hint's example as "target_session_attrs=REDACTED" with its closing
// parenthesis gone: the redactor took target_session_attrs for a secret.
// The example prints intact; the URL's passwords stay hidden.
func TestStoreInitReadOnlyHint(t *testing.T) {
	u, err := url.Parse(enginetest.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), "userinfo-pw-1")
	q := u.Query()
	q.Set("table", "lh_cli_ro_"+randid.Hex(6)) // never created: the session refuses
	q.Set("default_transaction_read_only", "on")
	q.Set("password", "param-pw-2")
	u.RawQuery = q.Encode()
	h := newHarness(t)
	r := h.run("store", "init", "--store", u.String())
	const example = "(postgres://host1,host2/db?target_session_attrs=read-write), which connects"
	if r.code != ExitInternal || !strings.Contains(r.stderr, "SQLSTATE 25006") || !strings.Contains(r.stderr, example) {
		t.Errorf("store init on a read-only server: exit %d, stderr %q; want %d with the hint's example %q intact", r.code, r.stderr, ExitInternal, example)
	}
	for _, secret := range []string{"userinfo-pw-1", "param-pw-2"} {
		if strings.Contains(r.stderr, secret) {
			t.Errorf("stderr shows the password %q: %q", secret, r.stderr)
		}
	}
}
