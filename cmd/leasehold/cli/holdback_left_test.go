package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/postgres"
	"github.com/leasehold/leasehold/redis"
)

// TestHoldbackTimeLeftNeverZero (red team): a waiter's
// status line said "no lease is granted for 0s more" with under half a
// second of the hold-back left. Under a second it is rounded up to the
// next 100ms; at or past its end, "less than a second".
func TestHoldbackTimeLeftNeverZero(t *testing.T) {
	for _, c := range []struct {
		left time.Duration
		want string
	}{
		{-2 * time.Second, "for less than a second more"},
		{0, "for less than a second more"},
		{time.Nanosecond, "for 0.1s more"},
		{10 * time.Millisecond, "for 0.1s more"},
		{250 * time.Millisecond, "for 0.3s more"},
		{300 * time.Millisecond, "for 0.3s more"},
		{499 * time.Millisecond, "for 0.5s more"},
		{901 * time.Millisecond, "for 1s more"},
		{1400 * time.Millisecond, "for 1s more"},
		{21*time.Second + 300*time.Millisecond, "for 21s more"},
	} {
		for _, owner := range []string{redis.HoldbackOwner, redis.FailoverHoldbackOwner, postgres.HoldbackOwner} {
			got := holdback(&leasehold.HeldError{Name: "lk", Owner: owner}, c.left)
			if !strings.Contains(got, "no lease is granted "+c.want+":") || strings.Contains(got, " 0s more") {
				t.Errorf("holdback(%s, %v) = %q, want %q", owner, c.left, got, c.want)
			}
		}
	}
}
