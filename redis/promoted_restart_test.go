package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/redis"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// TestPromotedReplicaRestartDirect: with a plain redis:// URL, a replica R
// attaches to the primary P after the store's last check of the marker
// (so R's copy of the marker has "replicated" unset), is cut off and
// promoted by hand (REPLICAOF NO ONE), then holder H is granted x on P
// (R lacks that grant), and R is restarted from its own AOF (appendfsync
// always) before any client saw the replication. The clients are
// re-pointed to R. R reports a durable master never promoted, under a new
// run_id, just as P's own restart would (on Redis 7.0 the replication id
// and offsets start afresh either way): nothing tells the store that R's
// data came from another node. By default it must hold back, so that a
// new client gets x only after H's lease could have ended. Before the fix
// it granted at once: two holders.
func TestPromotedReplicaRestartDirect(t *testing.T) {
	durable := []string{"--appendonly", "yes", "--appendfsync", "always"}
	p := enginetest.StartRedis(t, durable...)
	r := enginetest.StartRedis(t, durable...)
	ctx := ctxT(t, 3*time.Minute)
	const ttl = 8 * time.Second
	prefix := uniquePrefix(t)
	sP := open(t, p.RedisURL(), redis.WithKeyPrefix(prefix), redis.WithHoldback(ttl))
	defer sP.Close()
	// The last check of the marker before the replication (Open checks;
	// no reconnection follows, so no other check is made).
	if _, err := sP.ServerState(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "first grant on P", func() error {
		rec, err := sP.TryAcquire(ctx, leasehold.AcquireRequest{Name: "warm", Owner: "w", TTL: time.Second})
		if err == nil {
			err = sP.Release(ctx, "warm", "w", rec.Token)
		}
		return err
	})

	opt, _ := goredis.ParseURL(r.RedisURL())
	rr := goredis.NewClient(opt)
	defer rr.Close()
	if err := rr.SlaveOf(ctx, "127.0.0.1", fmt.Sprint(p.Port)).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "R in sync, its AOF rewritten", func() error {
		info, err := rr.Info(ctx, "replication", "persistence").Result()
		if err != nil {
			return err
		}
		for _, want := range []string{"master_link_status:up", "aof_rewrite_in_progress:0", "aof_rewrite_scheduled:0", "aof_last_bgrewrite_status:ok"} {
			if !strings.Contains(info, want) {
				return errors.New("not yet " + want)
			}
		}
		if n, err := rr.Exists(ctx, prefix+"epoch").Result(); err != nil || n != 1 {
			return fmt.Errorf("marker on R: %d, %v", n, err)
		}
		return nil
	})
	if err := rr.SlaveOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}

	hStart := time.Now()
	h, err := sP.TryAcquire(ctx, leasehold.AcquireRequest{Name: "x", Owner: "H", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	hEnd := hStart.Add(ttl) // H believes it holds x until then at most

	r.Restart() // from its own AOF, a master never promoted
	sR := open(t, r.RedisURL(), redis.WithKeyPrefix(prefix), redis.WithHoldback(ttl))
	defer sR.Close()
	if st, err := sR.ServerState(ctx); err != nil || st.Durable {
		t.Errorf("ServerState of R after its restart = %+v, %v; want not durable (no never_replicated declared)", st, err)
	}
	grantAfterHoldback(ctx, t, sR, h, hEnd)
}

// TestNeverReplicatedParam: never_replicated= takes true or false, and is
// refused with Sentinel (which replicates and promotes by design); a
// durable server not declared never replicated is not taken for durable
// and holds back after a restart.
func TestNeverReplicatedParam(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	for _, u := range []string{
		"redis://127.0.0.1:1/0?never_replicated=yes",
		"redis://127.0.0.1:1/0?never_replicated=",
		"redis+sentinel://127.0.0.1:1/lh?never_replicated=true",
	} {
		if _, err := redis.Open(ctx, u); !errors.Is(err, leasehold.ErrInvalid) || !strings.Contains(err.Error(), "never_replicated") {
			t.Errorf("Open(%s) = %v; want an InvalidError about never_replicated", u, err)
		}
	}
	fc := goredis.NewFailoverClient(&goredis.FailoverOptions{MasterName: "lh", SentinelAddrs: []string{"127.0.0.1:1"}})
	defer fc.Close()
	if _, err := redis.New(fc, redis.WithNeverReplicated()); !errors.Is(err, leasehold.ErrInvalid) {
		t.Errorf("New(Sentinel client, WithNeverReplicated()) = %v; want ErrInvalid", err)
	}

	srv := enginetest.StartRedis(t, "--appendonly", "yes", "--appendfsync", "always")
	prefix := uniquePrefix(t)
	s := open(t, srv.RedisURL()+"?never_replicated=false", redis.WithKeyPrefix(prefix), redis.WithHoldback(time.Minute))
	defer s.Close()
	if st, err := s.ServerState(ctx); err != nil || st.Durable {
		t.Fatalf("ServerState = %+v, %v; want not durable", st, err)
	}
	srv.Restart()
	var he *leasehold.HeldError
	eventually(t, "TryAcquire after the restart", func() error {
		_, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "n", Owner: "o", TTL: time.Second})
		if errors.As(err, &he) || err == nil {
			return nil
		}
		return err
	})
	if he == nil || he.Owner != redis.HoldbackOwner {
		t.Fatalf("TryAcquire after a durable restart, not declared never replicated: %+v; want a hold-back", he)
	}
}

// grantAfterHoldback tries to take H's name as owner C on s until it is
// granted, and fails the test if that happens before hEnd (the latest
// moment H may believe it holds the name: two holders), if C's token is
// not above H's, or if s never held back.
func grantAfterHoldback(ctx context.Context, t *testing.T, s leasehold.Store, h leasehold.Record, hEnd time.Time) {
	t.Helper()
	heldBack := 0
	for {
		rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: h.Name, Owner: "C", TTL: h.TTL})
		if err == nil {
			if now := time.Now(); now.Before(hEnd) {
				t.Fatalf("C was granted %s (token %d) %s before H's lease (token %d) could have ended: two holders (%d hold-back refusals)",
					h.Name, rec.Token, hEnd.Sub(now).Round(time.Millisecond), h.Token, heldBack)
			}
			if rec.Token <= h.Token {
				t.Errorf("C's token %d is not above H's %d", rec.Token, h.Token)
			}
			break
		}
		var he *leasehold.HeldError
		if errors.As(err, &he) && redis.IsHoldback(he.Owner) {
			heldBack++
		} else if ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if heldBack == 0 {
		t.Errorf("no hold-back after the restart")
	}
}
