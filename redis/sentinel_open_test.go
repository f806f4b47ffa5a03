package redis_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/redis"
	"github.com/leasehold/leasehold/testrig/enginetest"
	"github.com/leasehold/leasehold/testrig/redissentinel"
	"github.com/leasehold/leasehold/testrig/silent"
)

// TestSentinelOpenErrors: deployment errors at Open say what is wrong (they
// all said "INFO server has no run_id or uptime_in_seconds" before): a
// master name the sentinels do not know, a data node given as a sentinel,
// a db out of range (also on a redis:// URL). Sentinels that name
// different primaries are a transient error (TestSentinelDisagreeTransient).
func TestSentinelOpenErrors(t *testing.T) {
	d := redissentinel.Start(t, redissentinel.Options{})
	other := enginetest.StartRedis(t)
	ctx := ctxT(t, 2*time.Minute)
	good := d.URL("")
	for _, c := range []struct{ url, want string }{
		{strings.Replace(good, "/"+redissentinel.MasterName, "/nomaster", 1), `no sentinel at ` + d.Sentinels[0].Addr()},
		{"redis+sentinel://" + d.Nodes[0].Addr() + "/" + redissentinel.MasterName, d.Nodes[0].Addr() + " is not a sentinel (it is a Redis server): give sentinel addresses"},
		{d.URL("db=99"), "db 99 is out of range (the server has 16)"},
		{strings.TrimSuffix(other.RedisURL(), "/0") + "/99", "db 99 is out of range (the server has 16)"},
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
	// The refusal of an unknown master is plain English and names the
	// sentinels that answered.
	_, err = redis.Open(ctx, strings.Replace(good, "/"+redissentinel.MasterName, "/nomaster", 1))
	if err == nil || !strings.Contains(err.Error(), `knows a master named "nomaster"`) {
		t.Errorf("Open of an unknown master: %v, want \"no sentinel at ... knows a master named \"nomaster\"\"", err)
	}
}

// TestSentinelHung: one sentinel of three stopped (SIGSTOP: it accepts
// connections and never answers) is left out. Open failed after its whole
// context (every sentinel waited for, then the failover client's own
// queries); it succeeds within the grace after the first answers, and the
// store grants and releases through the two sentinels that answered.
func TestSentinelHung(t *testing.T) {
	d := redissentinel.Start(t, redissentinel.Options{})
	d.Sentinels[0].Signal(syscall.SIGSTOP)
	t.Cleanup(func() { d.Sentinels[0].Signal(syscall.SIGCONT) })
	ctx := ctxT(t, 20*time.Second)
	start := time.Now()
	s, err := redis.Open(ctx, d.URL(""), redis.WithHoldback(0))
	took := time.Since(start)
	if err != nil {
		t.Fatalf("Open with one sentinel stopped: %v (after %s)", err, took)
	}
	defer s.Close()
	// Generous: the grace is 1s; before the fix Open took 10s.
	t.Logf("Open with one sentinel stopped took %s", took)
	if took > 5*time.Second {
		t.Errorf("Open with one sentinel stopped took %s, want well within the 20s context", took)
	}
	rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "hung", Owner: "o", TTL: time.Minute})
	if err != nil {
		t.Fatalf("TryAcquire with one sentinel stopped: %v", err)
	}
	if err := s.Release(ctx, "hung", "o", rec.Token); err != nil {
		t.Fatalf("Release with one sentinel stopped: %v", err)
	}
}

// TestSentinelNoneAnswer: with no sentinel answering, Open says which
// sentinels it tried and why: their dial errors when they refuse (it said
// only "context deadline exceeded"), "no sentinel answered within" when
// they accept and never answer.
func TestSentinelNoneAnswer(t *testing.T) {
	a, b := "127.0.0.1:"+strconv.Itoa(enginetest.FreePort(t)), "127.0.0.1:"+strconv.Itoa(enginetest.FreePort(t))
	ctx := ctxT(t, 30*time.Second)
	_, err := redis.Open(ctx, "redis+sentinel://"+a+","+b+"/lh")
	if err == nil || errors.Is(err, leasehold.ErrInvalid) || ctx.Err() != nil {
		t.Fatalf("Open with refusing sentinels: %v (context: %v), want an error before the deadline", err, ctx.Err())
	}
	for _, want := range []string{"no sentinel answered", a + ": dial tcp", b + ": dial tcp", "connection refused"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Open with refusing sentinels: %v, want it to say %q", err, want)
		}
	}
	t.Logf("refused: %v", err)
	// A server that accepts connections and never answers.
	l := silent.Listen(t)
	hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = redis.Open(hctx, "redis+sentinel://"+l.Addr()+"/lh")
	if err == nil || !strings.Contains(err.Error(), "no sentinel answered within") || !strings.Contains(err.Error(), l.Addr()) {
		t.Errorf("Open with a hung sentinel: %v, want \"no sentinel answered within\" naming %s", err, l.Addr())
	}
	t.Logf("hung: %v", err)
}
