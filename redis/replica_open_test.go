package redis_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/redis"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// client returns a plain go-redis client of srv, closed when the test ends.
func client(t *testing.T, srv *enginetest.Server) *goredis.Client {
	opt, _ := goredis.ParseURL(srv.RedisURL())
	c := goredis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

// waitInfo waits until srv's INFO replication contains every line of want.
func waitInfo(ctx context.Context, t *testing.T, c *goredis.Client, want ...string) {
	t.Helper()
	eventually(t, fmt.Sprintf("INFO replication with %q", want), func() error {
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		for _, w := range want {
			if !strings.Contains(info, w+"\r\n") {
				return errors.New("not yet " + w)
			}
		}
		return nil
	})
}

// replicaOf makes c's server a replica of the server on port and waits
// until its link to it is up.
func replicaOf(ctx context.Context, t *testing.T, c *goredis.Client, port int) {
	t.Helper()
	if err := c.SlaveOf(ctx, "127.0.0.1", fmt.Sprint(port)).Err(); err != nil {
		t.Fatal(err)
	}
	waitInfo(ctx, t, c, "master_link_status:up")
}

// dropClients closes every normal client connection of c's server, so
// that stores on it dial again (and so check the server again).
func dropClients(ctx context.Context, t *testing.T, c *goredis.Client) {
	t.Helper()
	if err := c.Do(ctx, "CLIENT", "KILL", "TYPE", "normal").Err(); err != nil {
		t.Fatal(err)
	}
}

// TestWritableReplicaRefused (issue 31, item 1): a writable replica
// (replica-read-only no) given as the store in a plain redis:// URL is
// refused at Open with an InvalidError that names its primary and what to
// do; and a store whose server became such a replica refuses when it
// re-checks the server after a new connection. Before the fix Open
// succeeded and grants on the replica and on its primary overlapped.
func TestWritableReplicaRefused(t *testing.T) {
	p := enginetest.StartRedis(t)
	r := enginetest.StartRedis(t, "--replicaof", "127.0.0.1", fmt.Sprint(p.Port), "--replica-read-only", "no")
	ctx := ctxT(t, 2*time.Minute)
	primary := fmt.Sprintf("127.0.0.1:%d", p.Port)
	wantRefusal := func(err error) error {
		if errors.Is(err, leasehold.ErrInvalid) && strings.Contains(err.Error(), primary) &&
			strings.Contains(err.Error(), "redis+sentinel://") && strings.Contains(err.Error(), "replica") {
			return nil
		}
		return fmt.Errorf("got %v; want an InvalidError naming the primary %s and redis+sentinel://", err, primary)
	}
	s, err := redis.Open(ctx, r.RedisURL(), redis.WithKeyPrefix(uniquePrefix(t)), redis.WithHoldback(0))
	if s != nil {
		s.Close()
	}
	if rerr := wantRefusal(err); rerr != nil {
		t.Errorf("Open(writable replica): %v", rerr)
	}

	// A store on a master that then becomes a writable replica: the
	// next check (after a dial) refuses.
	a := enginetest.StartRedis(t)
	prefix := uniquePrefix(t)
	sa := open(t, a.RedisURL(), redis.WithKeyPrefix(prefix), redis.WithHoldback(0))
	defer sa.Close()
	if _, err := sa.TryAcquire(ctx, leasehold.AcquireRequest{Name: "n", Owner: "o", TTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	ca := client(t, a)
	if err := ca.ConfigSet(ctx, "replica-read-only", "no").Err(); err != nil {
		t.Fatal(err)
	}
	replicaOf(ctx, t, ca, p.Port)
	dropClients(ctx, t, ca)
	eventually(t, "TryAcquire on the store's server turned replica", func() error {
		_, err := sa.TryAcquire(ctx, leasehold.AcquireRequest{Name: "m", Owner: "o", TTL: time.Second})
		if rerr := wantRefusal(err); rerr != nil {
			return rerr
		}
		return nil
	})
}

// TestNeverReplicatedDataLost (issue 31, item 2a): a server declared
// never replicated (durable: appendonly yes, appendfsync always) restarts
// with its AOF directory removed, so it comes up empty while holder H's
// lease runs. The store must hold back, as for a server that is not
// durable: the store's marker is missing, which is what a lost data set
// looks like. Before the fix it granted at once (two holders).
func TestNeverReplicatedDataLost(t *testing.T) {
	srv := enginetest.StartRedis(t, "--appendonly", "yes", "--appendfsync", "always")
	ctx := ctxT(t, 2*time.Minute)
	const ttl = 4 * time.Second
	prefix := uniquePrefix(t)
	s := open(t, srv.RedisURL()+"?never_replicated=true", redis.WithKeyPrefix(prefix), redis.WithHoldback(ttl))
	defer s.Close()
	var h leasehold.Record
	var hStart time.Time
	eventually(t, "H's grant", func() error {
		hStart = time.Now()
		var err error
		h, err = s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "x", Owner: "H", TTL: ttl})
		return err
	})
	hEnd := hStart.Add(ttl)
	srv.Kill()
	if err := os.RemoveAll(filepath.Join(srv.Dir, "appendonlydir")); err != nil {
		t.Fatal(err)
	}
	srv.Start()
	grantAfterHoldback(ctx, t, s, h, hEnd)
	var he *leasehold.HeldError
	_, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "y", Owner: "C", TTL: ttl})
	if err != nil && !(errors.As(err, &he) && redis.IsHoldback(he.Owner)) {
		t.Fatal(err)
	}
	srv.Kill()
	os.RemoveAll(filepath.Join(srv.Dir, "appendonlydir"))
	srv.Start()
	eventually(t, "hold-back after a second loss", func() error {
		_, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "z", Owner: "C", TTL: ttl})
		if errors.As(err, &he) && he.Owner == redis.LostHoldbackOwner {
			return nil
		}
		return fmt.Errorf("TryAcquire = %v; want a hold-back from %q", err, redis.LostHoldbackOwner)
	})
}

// TestReplicationChangeHoldbackOwner (issue 31, item 3, #11): a replica
// attached to and detached from a server that never restarted gives the
// server a new replication id; the hold-back then says so
// (ReplicationHoldbackOwner), not that Redis restarted.
func TestReplicationChangeHoldbackOwner(t *testing.T) {
	a := enginetest.StartRedis(t)
	b := enginetest.StartRedis(t)
	ctx := ctxT(t, 2*time.Minute)
	s := open(t, a.RedisURL(), redis.WithKeyPrefix(uniquePrefix(t)), redis.WithHoldback(time.Minute))
	defer s.Close()
	st, err := s.ServerState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ca, cb := client(t, a), client(t, b)
	replicaOf(ctx, t, cb, a.Port)
	if err := cb.SlaveOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	waitInfo(ctx, t, ca, "connected_slaves:0")
	dropClients(ctx, t, ca)
	// The first TryAcquire may still run on the cached check (the fresh
	// server's own hold-back); the one after the reconnection checks.
	eventually(t, "TryAcquire after the replication change", func() error {
		_, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "n", Owner: "o", TTL: time.Second})
		var he *leasehold.HeldError
		if errors.As(err, &he) && he.Owner == redis.ReplicationHoldbackOwner && redis.IsHoldback(he.Owner) {
			return nil
		}
		return fmt.Errorf("TryAcquire = %v; want a hold-back from %q", err, redis.ReplicationHoldbackOwner)
	})
	st2, err := s.ServerState(ctx)
	if err != nil || st2.RunID != st.RunID || st2.ReplID == st.ReplID {
		t.Fatalf("ServerState before %+v, after %+v, %v: want the same run id and a new replication id", st, st2, err)
	}
}

// TestNeverReplicatedContradictions (issue 31, item 4, #12): a duplicated
// never_replicated parameter, never_replicated=true with wait_replicas,
// and never_replicated=true on a server that has replicas connected are
// refused with an InvalidError naming never_replicated. Before the fix
// the last duplicate won silently, and the others opened.
func TestNeverReplicatedContradictions(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	p := enginetest.StartRedis(t, "--appendonly", "yes", "--appendfsync", "always")
	for _, q := range []string{
		"never_replicated=true&never_replicated=false",
		"never_replicated=false&never_replicated=true",
		"never_replicated=true&wait_replicas=1&wait_timeout=100ms",
	} {
		s, err := redis.Open(ctx, p.RedisURL()+"?"+q, redis.WithKeyPrefix(uniquePrefix(t)))
		var ie *leasehold.InvalidError
		if !errors.As(err, &ie) || ie.Field != "never_replicated" {
			t.Errorf("Open(?%s) = %v; want an InvalidError on never_replicated", q, err)
		}
		if s != nil {
			s.Close()
		}
	}
	r := enginetest.StartRedis(t)
	replicaOf(ctx, t, client(t, r), p.Port)
	waitInfo(ctx, t, client(t, p), "connected_slaves:1")
	s, err := redis.Open(ctx, p.RedisURL()+"?never_replicated=true", redis.WithKeyPrefix(uniquePrefix(t)))
	var ie *leasehold.InvalidError
	if !errors.As(err, &ie) || ie.Field != "never_replicated" || !strings.Contains(ie.Reason, "1 replica") {
		t.Errorf("Open(never_replicated=true) on a primary with a replica = %v; want an InvalidError on never_replicated naming the replica", err)
	}
	if s != nil {
		s.Close()
	}
}
