package sqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/sqlite"
	"github.com/leasehold/leasehold/storetest"
)

// TestTwoOpenersOneFile: two Stores on one file (as two processes would
// have) exclude each other, and a waiter on one is woken by a release on
// the other through the data_version watch.
func TestTwoOpenersOneFile(t *testing.T) {
	s1, s2 := twoOpeners(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if last := storetest.Exclusion(t, ctx, []leasehold.Store{s1, s2}, "shared/job", 8, 5); last < 40 {
		t.Errorf("last token %d, want >= 40 (one a grant)", last)
	}
}

// TestCrossOpenerWatch: a release through one Store notifies a watcher on
// another Store of the same file.
func TestCrossOpenerWatch(t *testing.T) {
	s1, s2 := twoOpeners(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rec, err := s1.TryAcquire(ctx, leasehold.AcquireRequest{Name: "w", Owner: "a", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := s2.Watch(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	drain(ch) // the first poll may report the initial state
	if err := s1.Release(ctx, "w", "a", rec.Token); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("watcher on the other opener not notified within 10s")
	}
}

func drain(ch <-chan struct{}) {
	time.Sleep(20 * time.Millisecond)
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// TestRebootFreesLeases: a row written under another boot id is free, and
// the next grant's token is still greater.
func TestRebootFreesLeases(t *testing.T) {
	p := filepath.Join(t.TempDir(), "boot.db")
	ctx := context.Background()
	before, err := sqlite.Open(p, sqlite.WithBootID("boot-1"))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := before.TryAcquire(ctx, leasehold.AcquireRequest{Name: "job", Owner: "a", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	before.Close()
	after, err := sqlite.Open(p, sqlite.WithBootID("boot-2"))
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	if _, err := after.Get(ctx, "job"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("lease of the previous boot still live: %v", err)
	}
	if l, _ := after.List(ctx, ""); len(l) != 0 {
		t.Fatalf("List shows leases of the previous boot: %+v", l)
	}
	if err := after.Renew(ctx, "job", "a", rec.Token, time.Hour); !errors.Is(err, leasehold.ErrNotHeld) {
		t.Fatalf("renewal of a previous boot's lease: %v", err)
	}
	next, err := after.TryAcquire(ctx, leasehold.AcquireRequest{Name: "job", Owner: "b", TTL: time.Hour})
	if err != nil || next.Token <= rec.Token {
		t.Fatalf("grant after reboot: %+v, %v (previous token %d)", next, err, rec.Token)
	}
}

// TestExpiryOnBootClock: expiry follows the injected boot-time clock, so a
// wall-clock jump moves nothing and a suspend expires leases.
func TestExpiryOnBootClock(t *testing.T) {
	f := clock.NewFake(time.Now())
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "clock.db"), sqlite.WithClock(f))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if _, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "job", Owner: "a", TTL: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	f.Advance(9 * time.Second)
	if _, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "job", Owner: "b", TTL: time.Second}); !errors.Is(err, leasehold.ErrHeld) {
		t.Fatalf("before expiry: %v, want ErrHeld", err)
	}
	f.Suspend(2 * time.Second) // boot time moves while suspended
	if _, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "job", Owner: "b", TTL: time.Second}); err != nil {
		t.Fatalf("after the boot clock passed expiry: %v", err)
	}
}

func TestOpenRejectsBadPaths(t *testing.T) {
	for _, p := range []string{"", "a?mode=ro", "a#b", "a\x00b"} {
		if _, err := sqlite.Open(p); !errors.Is(err, leasehold.ErrInvalid) {
			t.Errorf("Open(%q): %v, want ErrInvalid", p, err)
		}
	}
}
