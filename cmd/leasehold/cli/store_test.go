package cli

import (
	"os"
	"strings"
	"testing"
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
