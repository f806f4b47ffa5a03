package redis_test

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/redis"
	"github.com/leasehold/leasehold/stores"
	"github.com/leasehold/leasehold/testrig/enginetest"
	"github.com/leasehold/leasehold/testrig/redissentinel"
)

// TestSentinelPromotedRestart: a replica cut from replication (it lacks
// holder H's grant) is promoted when the primary and the other replica
// die, and is then killed and restarted from its own AOF (appendfsync
// always). It reports a durable master never promoted, under a new
// run_id; through Sentinel that proves nothing about whose grants its
// data holds, so a new client is held back, and gets the lease only after
// H's TTL. Before the fix the store took it for a durable restart and
// granted at once: two holders.
func TestSentinelPromotedRestart(t *testing.T) {
	d := redissentinel.Start(t, redissentinel.Options{
		Extra:     []string{"--save", "", "--appendonly", "yes", "--appendfsync", "always"},
		NoPromote: []int{2},
	})
	ctx := ctxT(t, 3*time.Minute)
	const ttl = 8 * time.Second
	url := d.URL(fmt.Sprintf("holdback=%s&prefix=%s", ttl, uniquePrefix(t)))
	s1, err := stores.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	if st, err := s1.(*redis.Store).ServerState(ctx); err != nil || st.Durable {
		t.Errorf("ServerState through Sentinel = %+v, %v; want not durable", st, err)
	}
	// Wait out the hold-back of the fresh server's start.
	eventually(t, "first grant", func() error {
		_, err := s1.TryAcquire(ctx, leasehold.AcquireRequest{Name: "warm", Owner: "w", TTL: time.Second})
		return err
	})
	// Cut both replicas off (stopped, links killed): node 1, which the
	// sentinels will promote, lacks what the primary grants now.
	for _, i := range []int{1, 2} {
		d.Nodes[i].Signal(syscall.SIGSTOP)
	}
	if err := d.Client(0).ClientKillByFilter(ctx, "TYPE", "replica").Err(); err != nil {
		t.Fatal(err)
	}
	hStart := time.Now()
	h, err := s1.TryAcquire(ctx, leasehold.AcquireRequest{Name: "x", Owner: "H", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	hEnd := hStart.Add(ttl) // H believes it holds until then at most
	d.Nodes[0].Kill()
	for _, i := range []int{1, 2} {
		d.Nodes[i].Signal(syscall.SIGCONT)
	}
	if cur, err := d.WaitPrimary(ctx, 0); err != nil || cur != 1 {
		t.Fatalf("promotion: node %d, %v\n%s", cur, err, d.Logs())
	}
	d.Nodes[2].Kill()
	d.Restart(1, -1) // from its own AOF, a master again
	if cur, err := d.WaitPrimary(ctx, -1); err != nil || cur != 1 {
		t.Fatalf("after the restart: node %d, %v\n%s", cur, err, d.Logs())
	}
	s2, err := stores.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	grantAfterHoldback(ctx, t, s2, h, hEnd)
}

// TestRestartKeepsRecordedHoldback: a restart never shortens a hold-back
// a client already recorded in the marker (here written by hand, as a
// client that noticed a promotion would), even on a durable server
// declared never replicated that would otherwise hold back nothing.
func TestRestartKeepsRecordedHoldback(t *testing.T) {
	srv := enginetest.StartRedis(t, "--appendonly", "yes", "--appendfsync", "always")
	prefix := uniquePrefix(t)
	ctx := ctxT(t, 2*time.Minute)
	s := open(t, srv.RedisURL(), redis.WithKeyPrefix(prefix), redis.WithNeverReplicated())
	st, err := s.ServerState(ctx)
	if err != nil || !st.Durable {
		t.Fatalf("ServerState = %+v, %v; want durable", st, err)
	}
	s.Close()
	opt, _ := goredis.ParseURL(srv.RedisURL())
	rdb := goredis.NewClient(opt)
	defer rdb.Close()
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	until := now.Add(30 * time.Second).UnixMilli()
	if err := rdb.HSet(ctx, prefix+"epoch", "holdback_until_ms", until).Err(); err != nil {
		t.Fatal(err)
	}
	srv.Restart()
	s2 := open(t, srv.RedisURL(), redis.WithKeyPrefix(prefix), redis.WithNeverReplicated())
	defer s2.Close()
	_, err = s2.TryAcquire(ctx, leasehold.AcquireRequest{Name: "n", Owner: "o", TTL: time.Second})
	var he *leasehold.HeldError
	if !errors.As(err, &he) || he.Owner != redis.HoldbackOwner || he.Remaining < 20*time.Second {
		t.Fatalf("TryAcquire after a durable restart with a hold-back recorded until %d: %v; want held back about 30s", until, err)
	}
}

// TestFailoverHoldbackOwner: a hold-back on a promoted replica (here
// promoted by hand: REPLICAOF NO ONE) is answered from
// FailoverHoldbackOwner, so that it can be told as a failover rather than
// a restart; both are IsHoldback.
func TestFailoverHoldbackOwner(t *testing.T) {
	a := enginetest.StartRedis(t)
	b := enginetest.StartRedis(t)
	ctx := ctxT(t, time.Minute)
	opt, _ := goredis.ParseURL(b.RedisURL())
	rb := goredis.NewClient(opt)
	defer rb.Close()
	if err := rb.SlaveOf(ctx, "127.0.0.1", fmt.Sprint(a.Port)).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "replica in sync", func() error {
		info, err := rb.Info(ctx, "replication").Result()
		if err == nil && !strings.Contains(info, "master_link_status:up") {
			err = errors.New("link not up")
		}
		return err
	})
	if err := rb.SlaveOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	s := open(t, b.RedisURL(), redis.WithKeyPrefix(uniquePrefix(t)), redis.WithHoldback(30*time.Second))
	defer s.Close()
	_, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "n", Owner: "o", TTL: time.Second})
	var he *leasehold.HeldError
	if !errors.As(err, &he) || he.Owner != redis.FailoverHoldbackOwner || !redis.IsHoldback(he.Owner) {
		t.Fatalf("TryAcquire on a promoted replica: %v; want a hold-back from %q", err, redis.FailoverHoldbackOwner)
	}
	if redis.IsHoldback("alice") || !redis.IsHoldback(redis.HoldbackOwner) {
		t.Errorf("IsHoldback")
	}
}
