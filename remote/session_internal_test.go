package remote

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
)

func testKeeper(t *testing.T, ttl time.Duration) (*keeper, *clock.Fake) {
	t.Helper()
	fc := clock.NewFake(time.Unix(1_000_000, 0))
	cfg, err := sessionOptions(ttl, []SessionOption{SessionClock(fc)})
	if err != nil {
		t.Fatal(err)
	}
	return newKeeper("s1", ttl, cfg, fc.Now(), fc.Boot()), fc
}

// runKeeper runs k's keepalive loop with send until the test ends.
func runKeeper(t *testing.T, k *keeper, send func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		k.run(ctx, k.cfg.clock.Now(), send, func(err error) bool { return errors.Is(err, ErrNoSession) })
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
}

func waitDone(t *testing.T, k *keeper) {
	t.Helper()
	select {
	case <-k.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("session not ended")
	}
}

// The deadline is TTL·(1−ρ) − ε from before the keepalive was sent, not
// from its reply, on both clocks.
func TestSessionDeadlineFromBeforeTheKeepalive(t *testing.T) {
	k, fc := testKeeper(t, 600*time.Millisecond)
	life := 600*time.Millisecond - 6*time.Millisecond - 5*time.Millisecond
	if d, b := k.Deadline(); !d.Equal(fc.Now().Add(life)) || b != fc.Boot()+life {
		t.Fatalf("deadline after open: %s, %s", d, b)
	}
	sent := make(chan time.Time, 10)
	runKeeper(t, k, func(context.Context) error {
		sent <- fc.Now()
		fc.Advance(50 * time.Millisecond) // the request takes 50 ms
		return nil
	})
	fc.WaitForTimers(1)
	fc.Advance(200 * time.Millisecond) // TTL/3: the keepalive is due
	t0 := <-sent
	for { // until the loop has recorded the confirmation and sleeps again
		d, _ := k.Deadline()
		if d.Equal(t0.Add(life)) {
			break
		}
		if d.After(t0.Add(life)) {
			t.Fatalf("deadline %s is later than t0 + life %s (taken from the reply?)", d, t0.Add(life))
		}
		time.Sleep(time.Millisecond)
	}
	if _, b := k.Deadline(); b != fc.Boot()-50*time.Millisecond+life {
		t.Fatalf("boot-time deadline %s, want %s", b, fc.Boot()-50*time.Millisecond+life)
	}
}

// A keepalive confirmed only after the deadline ends the session, and the
// deadline does not move.
func TestSessionLateConfirmationEndsIt(t *testing.T) {
	k, fc := testKeeper(t, 600*time.Millisecond)
	before, _ := k.Deadline()
	t0, b0 := fc.Now(), fc.Boot()
	fc.Advance(700 * time.Millisecond)
	if k.confirm(t0, b0) {
		t.Fatal("a confirmation after the deadline was accepted")
	}
	waitDone(t, k)
	if !errors.Is(k.Err(), leasehold.ErrLost) {
		t.Fatalf("Err = %v", k.Err())
	}
	if d, _ := k.Deadline(); d.After(before) {
		t.Fatalf("deadline moved from %s to %s", before, d)
	}
}

// A suspend past the boot-time deadline ends the session although the
// monotonic clock stood still.
func TestSessionBootDeadline(t *testing.T) {
	k, fc := testKeeper(t, 600*time.Millisecond)
	runKeeper(t, k, func(context.Context) error { return nil })
	fc.WaitForTimers(1)
	fc.Suspend(time.Second)
	if k.confirm(fc.Now(), fc.Boot()) {
		t.Fatal("a confirmation after a suspend past the boot-time deadline was accepted")
	}
	waitDone(t, k)
}

// A refused keepalive ends the session at once; transient errors are
// retried until the deadline, which then ends it. Both match ErrLost.
func TestSessionKeepaliveFailures(t *testing.T) {
	t.Run("refused", func(t *testing.T) {
		k, fc := testKeeper(t, 600*time.Millisecond)
		runKeeper(t, k, func(context.Context) error { return &ProblemError{Status: 404, Type: "no-session"} })
		fc.WaitForTimers(1)
		fc.Advance(200 * time.Millisecond)
		waitDone(t, k)
		if !errors.Is(k.Err(), leasehold.ErrLost) || !errors.Is(k.Err(), ErrNoSession) {
			t.Fatalf("Err = %v, want ErrLost and ErrNoSession", k.Err())
		}
		if d, _ := k.Deadline(); d.After(fc.Now()) {
			t.Fatalf("deadline %s after the end %s", d, fc.Now())
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		k, fc := testKeeper(t, 600*time.Millisecond)
		var mu sync.Mutex
		tries := 0
		runKeeper(t, k, func(context.Context) error {
			mu.Lock()
			tries++
			mu.Unlock()
			return errors.New("connection refused")
		})
		deadline, _ := k.Deadline()
		for fc.Now().Before(deadline) {
			select {
			case <-k.Done():
				t.Fatalf("ended at %s, before its deadline %s", fc.Now(), deadline)
			default:
			}
			fc.WaitForTimers(1)
			fc.Advance(10 * time.Millisecond)
		}
		waitDone(t, k)
		if !errors.Is(k.Err(), leasehold.ErrLost) {
			t.Fatalf("Err = %v", k.Err())
		}
		mu.Lock()
		defer mu.Unlock()
		if tries < 3 {
			t.Fatalf("%d keepalive attempts before the deadline, want retries", tries)
		}
	})
}

func TestSessionOptionsRejected(t *testing.T) {
	for name, tc := range map[string]struct {
		ttl  time.Duration
		opts []SessionOption
	}{
		"nil clock":        {time.Second, []SessionOption{SessionClock(nil)}},
		"rho too big":      {time.Second, []SessionOption{SessionDrift(0.5, 0)}},
		"negative eps":     {time.Second, []SessionOption{SessionDrift(0.01, -time.Millisecond)}},
		"no life left":     {20 * time.Millisecond, []SessionOption{SessionDrift(0.01, 20*time.Millisecond)}},
		"ttl too short":    {time.Millisecond, nil},
		"ttl way too long": {100 * time.Hour, nil},
	} {
		if _, err := sessionOptions(tc.ttl, tc.opts); !errors.Is(err, leasehold.ErrInvalid) {
			t.Errorf("%s: %v, want an invalid error", name, err)
		}
	}
}
