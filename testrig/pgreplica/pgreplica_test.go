//go:build unix

package pgreplica_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/testrig/pgreplica"
)

// TestPromoteAndRebase: a row written on the primary reaches the replica;
// after the primary is killed and the replica promoted, the multi-host URL
// reaches the new primary, on timeline 2; the old primary, re-based, streams
// from it, and a second promotion moves to timeline 3 and back to node a.
func TestPromoteAndRebase(t *testing.T) {
	s := pgreplica.Start(t)
	if s.Primary().Name != "a" || s.Timeline() != 1 {
		t.Fatalf("primary %s on timeline %d, want a on 1", s.Primary().Name, s.Timeline())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	exec := func(sql string) {
		t.Helper()
		conn, err := pgx.Connect(ctx, s.URL())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec("CREATE TABLE t (v int)")
	exec("INSERT INTO t VALUES (1)")
	for round, want := range []struct {
		node string
		tl   int64
	}{{"b", 2}, {"a", 3}} {
		s.CatchUp()
		s.Kill(s.Primary())
		s.Promote()
		if got := s.Primary().Name; got != want.node || s.Timeline() != want.tl {
			t.Fatalf("round %d: primary %s on timeline %d, want %s on %d", round, got, s.Timeline(), want.node, want.tl)
		}
		exec("INSERT INTO t VALUES (2)") // through the URL: the new primary
		s.Rebase()
		s.CatchUp()
		var n int
		if err := s.Query(s.Replica(), "SELECT count(*)::int FROM t", &n); err != nil || n != 2+round {
			t.Fatalf("round %d: replica has %d rows (%v), want %d", round, n, err, 2+round)
		}
	}
}

// TestDetachLosesCommits: what the primary commits after Detach is not on
// the promoted replica.
func TestDetachLosesCommits(t *testing.T) {
	s := pgreplica.Start(t)
	p := s.Primary()
	if err := s.Query(p, "CREATE TABLE t (v int)"); err != nil {
		t.Fatal(err)
	}
	s.CatchUp()
	s.Detach()
	if err := s.Query(p, "INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	s.Kill(p)
	s.Promote()
	var n int
	if err := s.Query(s.Primary(), "SELECT count(*)::int FROM t", &n); err != nil || n != 0 {
		t.Fatalf("promoted replica has %d rows (%v), want 0: the commit after Detach is lost", n, err)
	}
}
