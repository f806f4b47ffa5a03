package redis_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/redis"
	"github.com/leasehold/leasehold/testrig/enginetest"
	"github.com/leasehold/leasehold/testrig/redissentinel"
)

// TestSentinelOpenErrors: deployment errors at Open say what is wrong (they
// all said "INFO server has no run_id or uptime_in_seconds" before): a
// master name the sentinels do not know, a data node given as a sentinel,
// a db out of range (also on a redis:// URL), and sentinels that name
// different primaries under one master name (a stray sentinel monitoring
// another Redis: the store alternated between two primaries).
func TestSentinelOpenErrors(t *testing.T) {
	d := redissentinel.Start(t, redissentinel.Options{})
	other := enginetest.StartRedis(t)
	stray := d.StraySentinel("127.0.0.1:" + strconv.Itoa(other.Port))
	ctx := ctxT(t, 2*time.Minute)
	good := d.URL("")
	for _, c := range []struct{ url, want string }{
		{strings.Replace(good, "/"+redissentinel.MasterName, "/nomaster", 1), `know no master named "nomaster"`},
		{"redis+sentinel://" + d.Nodes[0].Addr() + "/" + redissentinel.MasterName, d.Nodes[0].Addr() + " is not a sentinel (it is a Redis server): give sentinel addresses"},
		{d.URL("db=99"), "db 99 is out of range (the server has 16)"},
		{strings.TrimSuffix(other.RedisURL(), "/0") + "/99", "db 99 is out of range (the server has 16)"},
		{strings.Replace(good, "/"+redissentinel.MasterName, ","+stray.Addr()+"/"+redissentinel.MasterName, 1), "the sentinels disagree on the primary"},
	} {
		s, err := redis.Open(ctx, c.url, redis.WithHoldback(0))
		if err == nil {
			s.Close()
			t.Errorf("Open(%s): no error, want %q", c.url, c.want)
			continue
		}
		if !errors.Is(err, leasehold.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%s): %v, want an invalid-input error saying %q", c.url, err, c.want)
		}
	}
	s, err := redis.Open(ctx, good, redis.WithHoldback(0))
	if err != nil {
		t.Fatalf("Open of the deployment's own sentinels: %v", err)
	}
	s.Close()
}
