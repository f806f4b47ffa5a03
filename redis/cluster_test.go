package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/redis"
	"github.com/leasehold/leasehold/storetest"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// startCluster starts a one-node Redis Cluster that owns every slot. One
// node is enough to prove the key layout: a cluster node refuses a script
// whose keys are in different slots (CROSSSLOT) even if it owns them all.
func startCluster(t *testing.T) *goredis.ClusterClient {
	_, cc := startClusterServer(t)
	return cc
}

// startClusterServer also returns the node, to restart. After a restart a
// cluster master refuses commands (CLUSTERDOWN) for a rejoin delay of
// min(cluster-node-timeout, 5s), here 1s.
func startClusterServer(t *testing.T) (*enginetest.Server, *goredis.ClusterClient) {
	// The cluster bus listens on its own port: by default the client port
	// + 10000, which can fall in the ephemeral range and be taken by an
	// outgoing connection (CI: "bind: Address already in use" on the bus
	// port). Choose it as the client port is chosen.
	srv := enginetest.StartRedis(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", "1000", "--cluster-port", strconv.Itoa(enginetest.FreePort(t)))
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
	return srv, cc
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
	// The function library is on every master; lost there (FUNCTION
	// FLUSH), it is loaded again by the next call.
	lib, _ := redis.FunctionLibrary()
	hasLib := func(what string) {
		t.Helper()
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error {
			libs, err := c.FunctionList(ctx, goredis.FunctionListQuery{LibraryNamePattern: lib}).Result()
			if err == nil && len(libs) != 1 {
				err = fmt.Errorf("%s has %d libraries named %s", c.Options().Addr, len(libs), lib)
			}
			return err
		})
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	hasLib("after the suite")
	if err := cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error { return c.FunctionFlush(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "after/flush", Owner: "o", TTL: time.Minute})
	if err != nil {
		t.Fatalf("TryAcquire after FUNCTION FLUSH: %v", err)
	}
	if err := s.Release(ctx, "after/flush", "o", rec.Token); err != nil {
		t.Errorf("Release after FUNCTION FLUSH: %v", err)
	}
	hasLib("after FUNCTION FLUSH and a call")
	if !s.(*redis.Store).UsesFunctions() {
		t.Error("the cluster's store does not call functions")
	}
}

// TestClusterRestart: the master that holds the marker restarts without
// persistence (its slots survive in nodes.conf, its keys do not). The
// cluster client dials through its node clients, which the store hooks, so
// the first TryAcquire after the restart is held back, not granted. (The
// hold-back counts from the node's start, so it must outlast the rejoin
// delay for the test to see it.)
func TestClusterRestart(t *testing.T) {
	srv, cc := startClusterServer(t)
	s, err := redis.New(cc, redis.WithKeyPrefix(uniquePrefix(t)), redis.WithHoldback(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := ctxT(t, 2*time.Minute)
	c, _ := leasehold.New(s, leasehold.WithOwner("a"))
	l, err := c.Acquire(ctx, "job", leasehold.TTL(time.Second)) // waits out the fresh node's hold-back
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.ServerState(ctx)
	if err != nil {
		t.Fatal(err)
	}

	srv.Restart()

	var he *leasehold.HeldError
	eventually(t, "first TryAcquire after the restart", func() error {
		_, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "other", Owner: "b", TTL: time.Minute})
		if err == nil || errors.As(err, &he) {
			return nil
		}
		return err
	})
	if he == nil || he.Owner != redis.HoldbackOwner {
		t.Fatalf("TryAcquire right after the restart: %+v, want a hold-back", he)
	}
	<-l.Done()
	if !errors.Is(l.Err(), leasehold.ErrLost) {
		t.Errorf("holder: %v, want ErrLost", l.Err())
	}
	st2, err := s.ServerState(ctx)
	if err != nil || st2.RunID == st.RunID || st2.TokenFloor <= st.TokenFloor {
		t.Errorf("ServerState after the restart = %+v, %v (before %+v)", st2, err, st)
	}
	// The restart lost the function library with the keys; the restart
	// check loaded it again.
	lib, _ := redis.FunctionLibrary()
	err = cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error {
		libs, err := c.FunctionList(ctx, goredis.FunctionListQuery{LibraryNamePattern: lib}).Result()
		if err == nil && len(libs) != 1 {
			err = fmt.Errorf("%d libraries named %s", len(libs), lib)
		}
		return err
	})
	if err != nil || !s.UsesFunctions() {
		t.Errorf("after the restart: %v (calls functions: %v)", err, s.UsesFunctions())
	}
}
