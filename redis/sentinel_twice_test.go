package redis_test

import (
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
)

// TestSentinelListedTwice (issue 31 red team, second pass, finding 1): a
// sentinel listed twice counted as two of a URL's three, so a stray
// sentinel listed twice (the same address, or 127.0.0.1 and localhost)
// made a majority alone while the one real sentinel of the URL was
// stopped: Open followed the stray's primary and granted a lease held on
// the real one. A repeated address is refused before any dial; a sentinel
// that answers under two addresses (the same SENTINEL MYID) is refused.
func TestSentinelListedTwice(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	for _, url := range []string{
		"redis+sentinel://127.0.0.1:1,127.0.0.1:1,127.0.0.1:2/m",
		"redis+sentinel://LocalHost:1,localhost:1/m",
	} {
		_, err := redis.Open(ctx, url)
		if !errors.Is(err, leasehold.ErrInvalid) || !strings.Contains(err.Error(), "listed twice") {
			t.Errorf("Open(%s): %v, want a usage error saying a sentinel is listed twice", url, err)
		}
	}

	d := redissentinel.Start(t, redissentinel.Options{})
	other := enginetest.StartRedis(t)
	stray := d.StraySentinel("127.0.0.1:" + strconv.Itoa(other.Port))
	port := strings.TrimPrefix(stray.Addr(), "127.0.0.1:")
	a := d.Sentinels[0]
	url := "redis+sentinel://127.0.0.1:" + port + ",localhost:" + port + "," + a.Addr() + "/" + redissentinel.MasterName + "?read_timeout=1s"
	a.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { a.Signal(syscall.SIGCONT) })
	s, err := redis.Open(ctx, url, redis.WithHoldback(0))
	if err == nil {
		rec, aerr := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "twice", Owner: "two", TTL: time.Minute})
		s.Close()
		t.Fatalf("Open through the stray listed twice succeeded (a grant on the stray's primary: %+v, %v); want a refusal", rec, aerr)
	}
	if !errors.Is(err, leasehold.ErrInvalid) || !strings.Contains(err.Error(), "are the same sentinel") {
		t.Fatalf("Open through the stray listed twice: %v, want a usage error naming the same sentinel under two addresses", err)
	}
	t.Logf("listed twice: %v", err)
}
