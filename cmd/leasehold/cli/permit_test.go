package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/testrig/proctest"
)

// TestPermitWaitingLine: with --permits, the waiting line and the --no-wait
// refusal name every holder of the N permits, each with its token, since
// when and its time left; a permit at or above N is not counted.
func TestPermitWaitingLine(t *testing.T) {
	h := newHarness(t)
	a := h.hold("pool/permit/0", "A")
	b := h.hold("pool/permit/1", "B")
	h.hold("pool/permit/5", "C") // outside --permits 2
	r := h.run("run", "--verbose", "--store", h.url, "--permits", "2", "-w", "2s", "pool", "--", "true")
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
	n := h.run("run", "--store", h.url, "--permits", "2", "-n", "--verbose", "pool", "--", "true")
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

// TestPermitMismatch (issue 29, item 8): with 2 of 2 permits of pool held
// (N recorded), "run -n --permits 3 pool" is refused with exit 78 and runs
// nothing (it ran: a third permit was free for N=3); a plain "run pool"
// beside the semaphore is refused, and so is a semaphore on a name held
// as a plain lease. Nothing is left held by the refused runs. On SQLite
// here, through the lease server in TestPermitMismatchServer.
func TestPermitMismatch(t *testing.T) {
	h := newHarness(t)
	c, err := leasehold.New(h.store(), leasehold.WithOwner("A"))
	if err != nil {
		t.Fatal(err)
	}
	permitMismatch(t, h, h.url, c)
}

func permitMismatch(t *testing.T, h *harness, url string, c *leasehold.Client) {
	ctx := t.Context()
	sem, _ := c.Semaphore("pool", 2)
	for i := 0; i < 2; i++ {
		l, err := sem.TryAcquire(ctx, leasehold.TTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
	}
	lock, err := c.TryAcquire(ctx, "lk", leasehold.TTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctx)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--permits", "3", "-n", "pool"}, "pool: a semaphore of 2 permits (recorded by A, holder of pool/permit/"},
		{[]string{"--permits", "3", "-w", "5", "pool"}, "a semaphore of 2 permits"},
		{[]string{"-n", "pool/permit"}, ""}, // another name: not refused
		{[]string{"-n", "pool"}, "pool: a semaphore whose permit pool/permit/"},
		{[]string{"--permits", "2", "-n", "lk"}, "lk: held as a plain lease (a lock) by A (token "},
	} {
		args := append(append([]string{"run", "--store", url}, tc.args...), "--", "echo", "ran")
		r := h.run(args...)
		if tc.want == "" {
			if r.code != 0 || r.stdout != "ran\n" {
				t.Errorf("%q: exit %d, stdout %q, stderr %q", tc.args, r.code, r.stdout, r.stderr)
			}
			continue
		}
		if r.code != ExitMismatch || r.stdout != "" || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d and %q", tc.args, r.code, r.stdout, r.stderr, ExitMismatch, tc.want)
		}
	}
	recs, err := c.Store().List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Owner != "A" {
			t.Errorf("a refused run left %s held by %s", r.Name, r.Owner)
		}
	}
	if len(recs) != 3 {
		t.Errorf("%d leases held, want A's 3: %+v", len(recs), recs)
	}
}

// TestLongNameNotASemaphore (issue 29 red team): a plain lease whose name
// is valid but too long to carry a permit suffix (249 to 256 bytes) is
// granted to run and hold; the check for live permits of NAME is skipped
// there (no permit of it can exist) instead of refusing the name as an
// invalid prefix.
func TestLongNameNotASemaphore(t *testing.T) {
	h := newHarness(t)
	for _, n := range []int{247, 248, 249, leasehold.MaxNameLen} {
		name := strings.Repeat("n", n)
		r := h.run("run", "--store", h.url, "-n", name, "--", "echo", "ran")
		if r.code != 0 || r.stdout != "ran\n" {
			t.Errorf("run, %d-byte name: exit %d, stdout %q, stderr %q", n, r.code, r.stdout, r.stderr)
		}
	}
	name := strings.Repeat("h", leasehold.MaxNameLen)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out, errb proctest.Buffer
	done := make(chan int, 1)
	e := &env{stdout: &out, stderr: &errb, open: h.open, openExisting: h.openExisting}
	go func() { done <- e.main(ctx, []string{"hold", "--store", h.url, "--ttl", "1m", name}) }()
	for i := 0; i < 600 && !strings.Contains(out.String(), "holding "); i++ {
		select {
		case code := <-done:
			t.Fatalf("hold, 256-byte name: exit %d, stderr %q", code, errb.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if !strings.Contains(out.String(), "holding "+name+" as ") {
		t.Fatalf("hold, 256-byte name: stdout %q, stderr %q", out.String(), errb.String())
	}
	cancel()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("hold, 256-byte name: still running 60s after its context ended; stderr %q", errb.String())
	}
}
