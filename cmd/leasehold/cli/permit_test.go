package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// TestPermitWaitingLine: with --permits, the waiting line and the --no-wait
// refusal name every holder of the N permits, each with its token, since
// when and its time left; a permit at or above N is not counted.
func TestPermitWaitingLine(t *testing.T) {
	h := newHarness(t)
	a := h.hold("pool/permit/0", "A")
	b := h.hold("pool/permit/1", "B")
	h.hold("pool/permit/5", "C") // outside --permits 2
	r := h.run("run", "--store", h.url, "--permits", "2", "-w", "2s", "pool", "--", "true")
	if r.code != ExitNotAcquired {
		t.Fatalf("exit %d, want %d; stderr %q", r.code, ExitNotAcquired, r.stderr)
	}
	for _, want := range []string{
		"leasehold: waiting for pool (2/2 permits held by A, B; A: token 1, since ",
		"; B: token 1, since ",
		", expires in ",
		"gave up waiting for pool after 2s",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if strings.Contains(r.stderr, "C:") {
		t.Errorf("the holder of a permit above N is named:\n%s", r.stderr)
	}
	n := h.run("run", "--store", h.url, "--permits", "2", "-n", "pool", "--", "true")
	if n.code != ExitNotAcquired || !strings.Contains(n.stderr, "pool: all 2 permits are held (A, B; A: token 1") {
		t.Errorf("--no-wait: exit %d; stderr %q", n.code, n.stderr)
	}
	// Both permits are leases of their own, each with its own tokens: the
	// first grant of each is token 1.
	if a.Token() != 1 || b.Token() != 1 {
		t.Errorf("permit tokens %d, %d", a.Token(), b.Token())
	}
}

func TestPermitLine(t *testing.T) {
	at := time.Date(2024, 1, 2, 3, 4, 5, 0, time.Local)
	recs := []leasehold.Record{
		{Name: "p/permit/0", Owner: "A", Token: 3, Remaining: 5 * time.Second, Acquired: at},
		{Name: "p/permit/1", Owner: "B", Token: 1, Remaining: 9 * time.Second},
	}
	got := permitLine("p", 2, recs, time.Second)
	want := "waiting for p (2/2 permits held by A, B; A: token 3, since 03:04:05, expires in 4s; B: token 1, expires in 8s)"
	if got != want {
		t.Errorf("permitLine =\n%q, want\n%q", got, want)
	}
}

// TestPermitRelease: "release NAME" from a permit holder's environment
// releases the permit named by LEASEHOLD_PERMIT, and only that one.
func TestPermitRelease(t *testing.T) {
	h := newHarness(t)
	h.hold("pool/permit/0", "A")
	b := h.hold("pool/permit/1", "B")
	t.Setenv("LEASEHOLD_OWNER", "B")
	t.Setenv("LEASEHOLD_TOKEN", "1")
	t.Setenv("LEASEHOLD_PERMIT", b.Name())
	if r := h.run("release", "--store", h.url, "pool"); r.code != 0 {
		t.Fatalf("release pool: exit %d, stderr %q", r.code, r.stderr)
	}
	s := h.store()
	if _, err := s.Get(t.Context(), "pool/permit/1"); err == nil {
		t.Error("permit 1 still held after release")
	}
	if rec, err := s.Get(t.Context(), "pool/permit/0"); err != nil || rec.Owner != "A" {
		t.Errorf("permit 0: %+v, %v; want still held by A", rec, err)
	}
	// Without a token anywhere: a usage error, nothing changed.
	t.Setenv("LEASEHOLD_TOKEN", "")
	if r := h.run("release", "--store", h.url, "pool/permit/0", "--owner", "A"); r.code != ExitUsage || !strings.Contains(r.stderr, "no token") {
		t.Errorf("release without a token: exit %d, stderr %q", r.code, r.stderr)
	}
	if _, err := s.Get(t.Context(), "pool/permit/0"); err != nil {
		t.Errorf("permit 0 after a refused release: %v", err)
	}
}
