package dynamodb_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/dynamodb"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// TestSkewLargerThanTTL: with max_clock_skew (3s) far above the TTL (1s),
// nobody takes a lease over before expiry + skew. In between the lease is
// expired by its writer's clock (Get reports no live lease and the holder
// may no longer renew) but not yet free: TryAcquire waits out the margin
// and then grants it. (With 50 ms and 400 ms, two dynalite round trips on a
// loaded machine could outlast the TTL before the test's second call.)
func TestSkewLargerThanTTL(t *testing.T) {
	const ttl, skew = time.Second, 3 * time.Second
	u := freshURL(t, enginetest.DynamoDBURL(t), "max_clock_skew", skew.String())
	s := open(t, u)
	defer s.Close()
	ctx := bg(t)
	t0 := time.Now()
	a, err := s.TryAcquire(ctx, req("x", "a", ttl))
	if err != nil {
		t.Fatal(err)
	}
	var he *leasehold.HeldError
	if _, err := s.TryAcquire(ctx, req("x", "b", ttl)); !errors.As(err, &he) || he.Owner != "a" {
		t.Fatalf("TryAcquire during the TTL: %v, want a *HeldError naming a", err)
	}
	if he.Remaining <= 0 || he.Remaining > ttl {
		t.Errorf("Remaining = %s, want in (0, %s]: it counts to the expiry, not to expiry + skew", he.Remaining, ttl)
	}

	time.Sleep(time.Until(t0.Add(ttl + 100*time.Millisecond)))
	if _, err := s.Get(ctx, "x"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Errorf("Get after the writer's expiry: %v, want ErrNotFound", err)
	}
	if err := s.Renew(ctx, "x", "a", a.Token, ttl); !errors.Is(err, leasehold.ErrNotHeld) {
		t.Errorf("Renew after the holder's own expiry: %v, want ErrNotHeld", err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	start := time.Now()
	_, err = s.TryAcquire(short, req("x", "b", ttl))
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryAcquire within the skew margin: %v, want it to wait (DeadlineExceeded)", err)
	}
	if d := time.Since(start); d < 90*time.Millisecond {
		t.Errorf("TryAcquire within the skew margin returned after %s without waiting", d)
	}
	item := rawItem(t, s.Client(), s.Table(), "x")
	if attrS(item, "Owner") != "a" || attrN(item, "Token") != "1" {
		t.Errorf("item changed within the skew margin: %v", item)
	}

	b, err := s.TryAcquire(ctx, req("x", "b", time.Minute))
	took := time.Since(t0)
	if err != nil {
		t.Fatal(err)
	}
	if b.Token <= a.Token {
		t.Errorf("takeover token %d, want > %d", b.Token, a.Token)
	}
	// The expiry was written at or after t0 (on this same clock), and a
	// takeover needs now > ExpiresAtMs + skew in whole milliseconds.
	if took < ttl+skew-time.Millisecond {
		t.Errorf("taken over %s after the grant, before TTL + skew = %s", took, ttl+skew)
	}
	t.Logf("TTL %s, max clock skew %s: taken over after %s", ttl, skew, took.Round(time.Millisecond))
}

// TestSkewedWriterClocks: a holder whose clock runs 3s behind writes an
// expiry that is already 1s past on a correct clock. With a margin larger
// than the clocks' difference the other writer still waits until the
// holder's own TTL has passed; with no margin it takes the lease over while
// the holder still believes it holds it, which is what the margin is for.
// (Scaled from 200 ms and 300 ms, whose takeover had to come within 200 ms
// of the grant, three dynalite round trips on a loaded machine.)
func TestSkewedWriterClocks(t *testing.T) {
	const ttl, behind = 2 * time.Second, 3 * time.Second
	base := enginetest.DynamoDBURL(t)
	for _, tc := range []struct {
		skew time.Duration
		safe bool
	}{{4 * time.Second, true}, {0, false}} {
		t.Run("skew="+tc.skew.String(), func(t *testing.T) {
			u := freshURL(t, base, "max_clock_skew", tc.skew.String())
			slow := open(t, u, dynamodb.WithClock(offsetClock{-behind}))
			defer slow.Close()
			good := open(t, u, dynamodb.WithCreateTable(false))
			defer good.Close()
			ctx := bg(t)
			t0 := time.Now()
			if _, err := slow.TryAcquire(ctx, req("x", "slow", ttl)); err != nil {
				t.Fatal(err)
			}
			// The holder counts the lease as its own until t0 + TTL (less its
			// drift margin) on its monotonic clock.
			c, _ := leasehold.New(good, leasehold.WithOwner("good"), leasehold.WithBackoff(time.Millisecond, 10*time.Millisecond))
			l, err := c.Acquire(ctx, "x", leasehold.TTL(time.Minute))
			took := time.Since(t0)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctx)
			t.Logf("holder's clock %s behind, max clock skew %s: taken over %s after the grant (holder's TTL %s)",
				behind, tc.skew, took.Round(time.Millisecond), ttl)
			if tc.safe && took < ttl {
				t.Errorf("taken over after %s, while the holder still held it (TTL %s)", took, ttl)
			}
			if !tc.safe && took >= ttl {
				t.Errorf("without a margin the takeover came after %s; expected it at once (this test shows the hazard)", took)
			}
		})
	}
}
