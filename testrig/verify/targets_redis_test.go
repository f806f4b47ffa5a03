package verify_test

import (
	"context"
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/redis"
	"github.com/leasehold/leasehold/testrig/verify"
)

// TestRedisAsRunTargets checks that the RedisAsRun targets are what their
// names say: neither counts as durable for the store, both are held back
// after a restart, "redis-nopersist" comes back empty and "redis-rdb" with
// what its last snapshot had.
func TestRedisAsRunTargets(t *testing.T) {
	for _, name := range verify.RedisAsRun {
		t.Run(name, func(t *testing.T) {
			tg := verify.StartTarget(t, name)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			rdb := goredis.NewClient(&goredis.Options{Addr: tg.Addr})
			defer rdb.Close()
			cfg, err := rdb.ConfigGet(ctx, "*").Result()
			if err != nil {
				t.Fatal(err)
			}
			wantSave := map[string]string{"redis-nopersist": "", "redis-rdb": "1 1"}[name]
			if cfg["appendonly"] != "no" || cfg["save"] != wantSave {
				t.Fatalf("appendonly %q, save %q; want no, %q", cfg["appendonly"], cfg["save"], wantSave)
			}
			before, err := rdb.LastSave(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			if err := rdb.Set(ctx, "probe", "v", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if name == "redis-rdb" {
				for { // the snapshot that has the probe
					n, err := rdb.LastSave(ctx).Result()
					if err != nil {
						t.Fatal(err)
					}
					if n > before {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
			killed := time.Now()
			tg.Kill()
			tg.Start()
			_, err = rdb.Get(ctx, "probe").Result()
			switch {
			case name == "redis-nopersist" && !errors.Is(err, goredis.Nil):
				t.Fatalf("after a restart without persistence: GET probe = %v; want nil", err)
			case name == "redis-rdb" && err != nil:
				t.Fatalf("after a restart with a snapshot: GET probe: %v", err)
			}

			s, err := redis.Open(ctx, tg.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			st, err := s.ServerState(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.Durable || s.Holdback() != verify.RedisAsRunHoldback || !st.HoldbackUntil.After(killed) {
				t.Fatalf("server state %+v, hold-back %s; want not durable, hold-back %s, holding back until after the kill (%s)", st, s.Holdback(), verify.RedisAsRunHoldback, killed)
			}
		})
	}
}
