package redis_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/redis"
	"github.com/leasehold/leasehold/testrig/enginetest"
	"github.com/leasehold/leasehold/testrig/redissentinel"
)

// TestSentinelStrayAlone (issue 31 red team, Redis item 1): a URL lists
// sentinels A and B of the deployment and S, a stray monitoring another
// Redis under the same master name. With S stopped a client opens through
// A and B; with A and B stopped and S answering alone, Open followed S to
// the other Redis (two holders on two primaries). Now a majority of the
// URL's sentinels must answer and agree: 1 of 3 is a transient error (not
// a usage error) that says who answered what.
func TestSentinelStrayAlone(t *testing.T) {
	d := redissentinel.Start(t, redissentinel.Options{})
	other := enginetest.StartRedis(t)
	otherAddr := "127.0.0.1:" + strconv.Itoa(other.Port)
	stray := d.StraySentinel(otherAddr)
	a, b := d.Sentinels[0], d.Sentinels[1]
	url := "redis+sentinel://" + a.Addr() + "," + b.Addr() + "," + stray.Addr() + "/" + redissentinel.MasterName + "?read_timeout=1s"
	ctx := ctxT(t, 2*time.Minute)

	stray.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { stray.Signal(syscall.SIGCONT) })
	s1, err := redis.Open(ctx, url, redis.WithHoldback(0))
	if err != nil {
		t.Fatalf("Open through A and B (the stray stopped): %v", err)
	}
	defer s1.Close()
	if _, err := s1.TryAcquire(ctx, leasehold.AcquireRequest{Name: "stray", Owner: "one", TTL: time.Minute}); err != nil {
		t.Fatalf("TryAcquire through A and B: %v", err)
	}

	stray.Signal(syscall.SIGCONT)
	a.Signal(syscall.SIGSTOP)
	b.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { a.Signal(syscall.SIGCONT); b.Signal(syscall.SIGCONT) })
	s2, err := redis.Open(ctx, url, redis.WithHoldback(0))
	if err == nil {
		rec, aerr := s2.TryAcquire(ctx, leasehold.AcquireRequest{Name: "stray", Owner: "two", TTL: time.Minute})
		s2.Close()
		t.Fatalf("Open through the stray alone succeeded (a second holder: %+v, %v); want a refusal", rec, aerr)
	}
	if errors.Is(err, leasehold.ErrInvalid) {
		t.Errorf("Open through the stray alone: %v, want a transient error, not a usage error", err)
	}
	for _, want := range []string{"1 of 3 sentinels answered", stray.Addr() + ": names " + otherAddr, a.Addr() + ":", b.Addr() + ":"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Open through the stray alone: %v, want it to say %q", err, want)
		}
	}
	t.Logf("stray alone: %v", err)
}

// TestSentinelDisagreeTransient (issue 31 red team, Redis item 2, #7):
// sentinels that answer and name different primaries (as during a
// failover, or beside a stray) are a transient error, which waits retry
// and the CLI exits 70 for; it was a usage error (exit 64).
func TestSentinelDisagreeTransient(t *testing.T) {
	d := redissentinel.Start(t, redissentinel.Options{})
	other := enginetest.StartRedis(t)
	stray := d.StraySentinel("127.0.0.1:" + strconv.Itoa(other.Port))
	ctx := ctxT(t, time.Minute)
	url := strings.Replace(d.URL(""), "/"+redissentinel.MasterName, ","+stray.Addr()+"/"+redissentinel.MasterName, 1)
	_, err := redis.Open(ctx, url, redis.WithHoldback(0))
	if err == nil || errors.Is(err, leasehold.ErrInvalid) || !strings.Contains(err.Error(), "sentinels disagree on the primary (a failover in progress?)") {
		t.Fatalf("Open with sentinels that disagree: %v, want a transient \"sentinels disagree on the primary (a failover in progress?)\"", err)
	}
	t.Logf("disagree: %v", err)
}

// TestSentinelRedialMajority: the majority is asked again whenever the
// store dials the primary (go-redis re-resolves it for every new
// connection), not only at Open: with two of three sentinels stopped a new
// connection is refused, and the store works again once they answer.
func TestSentinelRedialMajority(t *testing.T) {
	d := redissentinel.Start(t, redissentinel.Options{})
	ctx := ctxT(t, 2*time.Minute)
	s, err := redis.Open(ctx, d.URL("read_timeout=1s"), redis.WithHoldback(0))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	req := leasehold.AcquireRequest{Name: "redial", Owner: "o", TTL: time.Minute}
	rec, err := s.TryAcquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	a, b := d.Sentinels[0], d.Sentinels[1]
	a.Signal(syscall.SIGSTOP)
	b.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { a.Signal(syscall.SIGCONT); b.Signal(syscall.SIGCONT) })
	p, ok := d.Primary(ctx)
	if !ok {
		p = 0
	}
	killStoreConns(ctx, t, d.Client(p))
	_, err = s.Get(ctx, "redial")
	if err == nil || !strings.Contains(err.Error(), "1 of 3 sentinels answered") {
		t.Errorf("Get on a new connection with 2 of 3 sentinels stopped: %v, want \"1 of 3 sentinels answered\"", err)
	}
	a.Signal(syscall.SIGCONT)
	b.Signal(syscall.SIGCONT)
	// The sentinels answer again: the store works (retried: a resumed
	// sentinel may need a moment).
	for {
		err = s.Release(ctx, "redial", "o", rec.Token)
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("Release once the sentinels answer again: %v", err)
	}
}

// killStoreConns closes every normal client connection of the server but
// the caller's, so that the store's next command dials anew.
func killStoreConns(ctx context.Context, t *testing.T, c *goredis.Client) {
	t.Helper()
	if err := c.ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatalf("CLIENT KILL: %v", err)
	}
}

// TestSentinelURLMessages (issue 31 red team, #13): parameters of a
// redis+sentinel:// URL that gave confusing answers.
func TestSentinelURLMessages(t *testing.T) {
	dead := "127.0.0.1:" + strconv.Itoa(enginetest.FreePort(t))
	base := "redis+sentinel://" + dead + "/lh"
	ctx := ctxT(t, time.Minute)
	for _, c := range []struct {
		url     string
		want    string // "" : not a usage error (here: the sentinel does not answer)
		notWant string
	}{
		{base + "?max_retries=-5", "max_retries -5", ""},
		{base + "?max_retries=-1", "", ""},
		{base + "?dial_timeout=0s", "dial_timeout", ""},
		{base + "?dial_timeout=-1s", "dial_timeout", ""},
		// A read or write timeout below 1ms timed out every query:
		// "no sentinel answered within 1ms" (red team).
		// 0 or less is go-redis's "no timeout", which works.
		{base + "?read_timeout=1ns", "read_timeout: 1ns: too short", ""},
		{base + "?write_timeout=999us", "write_timeout: 999us: too short", ""},
		{base + "?read_timeout=5s&write_timeout=0.5ms", "write_timeout: 0.5ms: too short", ""},
		{base + "?read_timeout=0", "", ""},
		{base + "?read_timeout=-1s&write_timeout=-2", "", ""},
		{base + "?mastername=lh", "the master name is the URL's path", "master_name"},
		{"redis+sentinel://" + dead + "/my%20m", `master name "my m"`, ""},
	} {
		s, err := redis.Open(ctx, c.url)
		if err == nil {
			s.Close()
			t.Errorf("Open(%s): no error", c.url)
			continue
		}
		if c.want == "" {
			if errors.Is(err, leasehold.ErrInvalid) {
				t.Errorf("Open(%s): %v, want no usage error", c.url, err)
			}
			continue
		}
		if !errors.Is(err, leasehold.ErrInvalid) || !strings.Contains(err.Error(), c.want) || (c.notWant != "" && strings.Contains(err.Error(), c.notWant)) {
			t.Errorf("Open(%s): %v, want a usage error saying %q (and not %q)", c.url, err, c.want, c.notWant)
		}
	}
}

// TestSentinelOpenDuringFailover (#7): Opens during a SENTINEL FAILOVER
// may fail while the sentinels disagree, but never as a usage error, and
// a store opened before follows the new primary (its operations retried
// until they succeed). Whether an Open meets the disagreement depends on
// timing: the test asserts only that none is a usage error.
func TestSentinelOpenDuringFailover(t *testing.T) {
	d := redissentinel.Start(t, redissentinel.Options{})
	ctx := ctxT(t, 3*time.Minute)
	s, err := redis.Open(ctx, d.URL(""), redis.WithHoldback(0))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	done, stop := make(chan struct{}), make(chan struct{})
	var opens, failed, disagreed int
	var invalid []error
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			o, err := redis.Open(ctx, d.URL(""), redis.WithHoldback(0))
			opens++
			switch {
			case err == nil:
				o.Close()
			case errors.Is(err, leasehold.ErrInvalid):
				invalid = append(invalid, err)
			default:
				failed++
				if strings.Contains(err.Error(), "sentinels disagree on the primary (a failover in progress?)") {
					disagreed++
				}
			}
		}
	}()
	old, cur, ferr := d.Failover(ctx)
	close(stop)
	<-done
	if ferr != nil {
		t.Fatalf("failover: %v", ferr)
	}
	t.Logf("failover %d -> %d; %d Opens, %d failed (%d: the sentinels disagree), %d usage errors", old, cur, opens, failed, disagreed, len(invalid))
	if len(invalid) > 0 {
		t.Errorf("%d Opens during a failover answered with a usage error, the first: %v", len(invalid), invalid[0])
	}
	for {
		_, err = s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "failover", Owner: "o", TTL: time.Minute})
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("TryAcquire after the failover: %v", err)
	}
}
