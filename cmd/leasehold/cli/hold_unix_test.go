//go:build unix

package cli

import (
	"errors"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/testrig/servertest"
)

// TestHoldReleasesOnSIGHUP (issue 29 red team): closing the terminal or
// the ssh session that runs "hold" sends it SIGHUP; hold releases the lease
// and exits 0, as on SIGINT and SIGTERM. It died of the signal (129) and
// left the lease held for its TTL.
func TestHoldReleasesOnSIGHUP(t *testing.T) {
	// Catch SIGHUP in the test binary as well, for the whole test: a hold
	// that does not catch it must fail this test, not end the binary.
	guard := make(chan os.Signal, 1)
	signal.Notify(guard, syscall.SIGHUP)
	defer signal.Stop(guard)

	h := newHarness(t)
	h.create()
	stdout, _, done := h.startWatched("hold", "--store", h.url, "--ttl", "1m", "t/hup")
	s := h.store()
	// Wait for hold to say it holds, not for the grant in the store: a
	// SIGHUP between the two is a hangup while waiting (exit 129, the
	// grant released), which is what CI's run of stop 38 saw.
	servertest.WaitFor(t, "the hold", func() bool {
		return strings.Contains(stdout.String(), "holding t/hup")
	})
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.code != 0 || !strings.Contains(r.stderr, "hangup: released t/hup (token 1)") {
			t.Errorf("hold after SIGHUP: exit %d, stderr %q; want 0 and the release", r.code, r.stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("hold did not end within 30s of SIGHUP")
	}
	if _, err := s.Get(t.Context(), "t/hup"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Errorf("t/hup after hold's SIGHUP: %v, want not held", err)
	}
}
