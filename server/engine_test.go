package server

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/testrig/servertest"
)

// openEngine opens an engine on dir ("" keeps it in memory), closed when
// the test ends if the test has not closed it.
func openEngine(t testing.TB, dir string) *Engine {
	t.Helper()
	e, err := OpenEngine(EngineConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func TestEngineSessions(t *testing.T) {
	dir := t.TempDir()
	e := openEngine(t, dir)
	ctx := context.Background()
	s, err := e.OpenSession(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		_, err := e.Acquire(ctx, AcquireRequest{AcquireRequest: leasehold.AcquireRequest{Name: fmt.Sprint("s/", i), Owner: "a", TTL: time.Second}, Session: s.ID})
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.Acquire(ctx, AcquireRequest{AcquireRequest: leasehold.AcquireRequest{Name: "s/x", Owner: "a", TTL: time.Second}, Session: "nope"}); !errors.Is(err, ErrNoSession) {
		t.Fatalf("unknown session: %v", err)
	}
	if _, err := e.Get(ctx, "s/x"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("acquired with an unknown session: %v", err)
	}
	// Restart: the session and its leases come back.
	e.Close()
	e = openEngine(t, dir)
	defer e.Close()
	if l, _ := e.List(ctx, "s/"); len(l) != 3 {
		t.Fatalf("after restart %d session leases, want 3", len(l))
	}
	if _, err := e.KeepAlive(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.CloseSession(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	if l, _ := e.List(ctx, "s/"); len(l) != 0 {
		t.Fatalf("after close %d session leases, want 0", len(l))
	}
	if err := e.CloseSession(ctx, s.ID); !errors.Is(err, ErrNoSession) {
		t.Fatalf("second close: %v", err)
	}
}

// waitSnapshot waits until the engine in dir has written a snapshot.
func waitSnapshot(t *testing.T, dir string) {
	t.Helper()
	servertest.WaitFor(t, "a snapshot written", func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, "snap-*"))
		return len(m) > 0
	})
}

// TestEngineSnapshot: with a tiny snapshot threshold the engine snapshots
// as its log grows, deletes the segments a snapshot covers, and recovers
// the same leases and tokens from snapshot + log.
func TestEngineSnapshot(t *testing.T) {
	dir := t.TempDir()
	e, err := OpenEngine(EngineConfig{Dir: dir, SnapshotBytes: 8 << 10})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	held := map[string]uint64{}
	var last uint64
	for i := 0; i < 2000; i++ {
		name := fmt.Sprintf("snap/%d", i%300)
		if tok, ok := held[name]; ok {
			if err := e.Release(ctx, name, "o", tok); err != nil {
				t.Fatal(err)
			}
			delete(held, name)
			continue
		}
		rec, err := e.Acquire(ctx, pxReq(name, "o", time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		held[name] = rec.Token
		last = rec.Token
	}
	waitSnapshot(t, dir)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "log-*"))
	t.Logf("after 2000 operations: %d log segments left beside the snapshot", len(segs))
	e = openEngine(t, dir)
	defer e.Close()
	got, err := e.List(ctx, "snap/")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(held) {
		t.Fatalf("recovered %d leases, want %d", len(got), len(held))
	}
	for _, r := range got {
		if held[r.Name] != r.Token {
			t.Errorf("%s recovered with token %d, want %d", r.Name, r.Token, held[r.Name])
		}
	}
	rec, err := e.Acquire(ctx, pxReq("snap/new", "o", time.Hour))
	if err != nil || rec.Token <= last {
		t.Fatalf("token after recovery %d (%v), want > %d", rec.Token, err, last)
	}
}

// TestRepeatedReleaseAfterRestart: a holder that released (or whose lease
// expired) before the engine restarted may repeat its release afterwards
// and still gets nil, as the Store contract says; others still get
// ErrNotHeld. Found by the R3 fault suite, which retries a release whose
// reply was lost in a crash.
func TestRepeatedReleaseAfterRestart(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	e := openEngine(t, dir)
	s := StoreOf(e)
	rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "job", Owner: "a", RequestID: "r1", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, "job", "a", rec.Token); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openEngine(t, dir)
	defer e.Close()
	s = StoreOf(e)
	if err := s.Release(ctx, "job", "a", rec.Token); err != nil {
		t.Errorf("repeated release after a restart: %v, want nil", err)
	}
	if err := s.Release(ctx, "job", "b", rec.Token); !errors.Is(err, leasehold.ErrNotHeld) {
		t.Errorf("release by someone else after a restart: %v, want ErrNotHeld", err)
	}
	if _, err := s.Get(ctx, "job"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Errorf("Get of the released lease after a restart: %v, want ErrNotFound", err)
	}
	next, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "job", Owner: "b", RequestID: "r2", TTL: time.Minute})
	if err != nil || next.Token <= rec.Token {
		t.Errorf("acquire after a restart: token %d, %v; want a token above %d", next.Token, err, rec.Token)
	}
}
