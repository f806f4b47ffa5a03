package redis_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/enginetest"
	"github.com/leasehold/leasehold/redis"
	"github.com/leasehold/leasehold/storetest"
)

// startCluster starts a one-node Redis Cluster that owns every slot. One
// node is enough to prove the key layout: a cluster node refuses a script
// whose keys are in different slots (CROSSSLOT) even if it owns them all.
func startCluster(t *testing.T) *goredis.ClusterClient {
	srv := enginetest.StartRedis(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	addr := fmt.Sprintf("127.0.0.1:%d", srv.Port)
	ctx := ctxT(t, time.Minute)
	plain := goredis.NewClient(&goredis.Options{Addr: addr})
	defer plain.Close()
	args := []any{"CLUSTER", "ADDSLOTS"}
	for i := 0; i < 16384; i++ {
		args = append(args, i)
	}
	if err := plain.Do(ctx, args...).Err(); err != nil {
		t.Fatalf("CLUSTER ADDSLOTS: %v", err)
	}
	eventually(t, "cluster state ok", func() error {
		info, err := plain.ClusterInfo(ctx).Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "cluster_state:ok") {
			return fmt.Errorf("cluster not ready: %.40s", info)
		}
		return nil
	})
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{addr}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { cc.Close() })
	return cc
}

func TestClusterConformance(t *testing.T) {
	cc := startCluster(t)
	prefix := uniquePrefix(t)
	openStore := func(t testing.TB) leasehold.Store {
		s, err := redis.New(cc, redis.WithKeyPrefix(prefix), redis.WithHoldback(0))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	storetest.Run(t, storetest.Harness{
		Open:      openStore,
		Reopen:    func(t testing.TB, s leasehold.Store) leasehold.Store { s.Close(); return openStore(t) },
		Histories: storetest.HistoryConfig{Histories: 50},
	})
	// Names with braces get keys in one slot too, and List still finds them
	// by prefix.
	s := openStore(t)
	defer s.Close()
	ctx := context.Background()
	names := []string{"br/{a}", "br/}{", "br/{", "br/x}y{z"}
	for _, n := range names {
		if _, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: n, Owner: "o", TTL: time.Minute}); err != nil {
			t.Fatalf("TryAcquire(%q): %v", n, err)
		}
	}
	list, err := s.List(ctx, "br/{")
	if err != nil || len(list) != 2 || list[0].Name != "br/{" || list[1].Name != "br/{a}" {
		t.Errorf("List(br/{) = %+v, %v", list, err)
	}
}
