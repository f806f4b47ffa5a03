package redis_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/redis"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// eventually retries f until it returns nil or 30s pass (a restarted
// server refuses connections, then answers LOADING, for a moment).
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after 30s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestHoldback: a server that was just started (no marker, uptime shorter
// than the hold-back) may have lost leases, so the first grants wait.
func TestHoldback(t *testing.T) {
	srv := enginetest.StartRedis(t)
	// 5 s from the server's start (1.5 s could pass before the first
	// TryAcquire on a loaded machine), and a's TTL of 10 s outlives the
	// checks after its grant.
	const holdback = 5 * time.Second
	s := open(t, srv.RedisURL(), redis.WithKeyPrefix(uniquePrefix(t)), redis.WithHoldback(holdback))
	defer s.Close()
	ctx := ctxT(t, time.Minute)
	req := leasehold.AcquireRequest{Name: "hb", Owner: "a", TTL: 10 * time.Second}
	_, err := s.TryAcquire(ctx, req)
	var he *leasehold.HeldError
	if !errors.As(err, &he) || he.Owner != redis.HoldbackOwner {
		t.Fatalf("first TryAcquire on a fresh server = %v, want a HeldError from %q", err, redis.HoldbackOwner)
	}
	if he.Remaining <= 0 || he.Remaining > holdback || he.Token != 0 {
		t.Errorf("hold-back HeldError %+v: want 0 < Remaining <= %s and token 0", he, holdback)
	}
	st, err := s.ServerState(ctx)
	if err != nil || st.HoldbackUntil.IsZero() || st.Durable || st.TokenFloor == 0 || st.RunID == "" {
		t.Errorf("ServerState = %+v, %v", st, err)
	}
	time.Sleep(he.Remaining + 10*time.Millisecond)
	rec, err := s.TryAcquire(ctx, req)
	if err != nil {
		t.Fatalf("TryAcquire after the hold-back: %v", err)
	}
	if rec.Token < st.TokenFloor {
		t.Errorf("token %d below the floor %d", rec.Token, st.TokenFloor)
	}
	// The Client waits through a hold-back like any other holder.
	c, _ := leasehold.New(s, leasehold.WithOwner("b"))
	if _, err := c.TryAcquire(ctx, "hb"); !errors.Is(err, leasehold.ErrHeld) {
		t.Errorf("b while a holds: %v", err)
	}
}

// TestHoldbackUptimeRounding: a server started just before a whole second
// reports uptime_in_seconds 1 a moment later (the difference of two
// whole-second readings). The hold-back of a first use counts from the
// server's start, so it must not take now - uptime for the start: that is
// up to a second early, and with a hold-back as long as the longest TTL a
// grant would come while a holder of a lease lost in the restart still
// believes it holds it (suite R3 on a Redis without persistence found it).
// No grant may come before the moment before the start plus the hold-back.
func TestHoldbackUptimeRounding(t *testing.T) {
	const holdback = time.Second
	// Start the server 150 ms before a whole second and check it (Open
	// does) 100 ms after that second began: uptime_in_seconds is then 1,
	// and a second since the start has not passed.
	now := time.Now()
	second := now.Truncate(time.Second).Add(time.Second)
	if second.Sub(now) < 200*time.Millisecond {
		second = second.Add(time.Second)
	}
	time.Sleep(time.Until(second.Add(-150 * time.Millisecond)))
	before := time.Now()
	srv := enginetest.StartRedis(t)
	time.Sleep(time.Until(second.Add(100 * time.Millisecond)))
	s := open(t, srv.RedisURL(), redis.WithKeyPrefix(uniquePrefix(t)), redis.WithHoldback(holdback))
	defer s.Close()
	ctx := ctxT(t, time.Minute)
	st, err := s.ServerState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("server started within %s after %s; checked at %s; holding back until %s",
		time.Since(before).Round(time.Millisecond), before.Format("15:04:05.000"), time.Now().Format("15:04:05.000"), st.HoldbackUntil.Format("15:04:05.000"))
	if earliest := before.Add(holdback); st.HoldbackUntil.Before(earliest) {
		t.Fatalf("hold-back ends at %s, before the server's start plus the hold-back (after %s)",
			st.HoldbackUntil.Format("15:04:05.000"), earliest.Format("15:04:05.000"))
	}
	for time.Now().Before(before.Add(holdback)) {
		rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "early", Owner: "a", TTL: time.Second})
		if err == nil {
			t.Fatalf("granted token %d %s after the start, within the hold-back of %s", rec.Token, time.Since(before), holdback)
		}
		var he *leasehold.HeldError
		if !errors.As(err, &he) || he.Owner != redis.HoldbackOwner {
			t.Fatalf("TryAcquire within the hold-back: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRestartLosesData: Redis without persistence is killed and started
// again while a Client holds a lease with keepalive and another waits in
// Acquire. The holder finds its lease gone (ErrLost); the waiter gets the
// lease only after the hold-back, so never while the old holder could
// still believe it held it; the new token is above every earlier one.
func TestRestartLosesData(t *testing.T) {
	srv := enginetest.StartRedis(t)
	const ttl, holdback = 2 * time.Second, 3 * time.Second
	prefix := uniquePrefix(t)
	s1 := open(t, srv.RedisURL(), redis.WithKeyPrefix(prefix), redis.WithHoldback(holdback))
	defer s1.Close()
	s2 := open(t, srv.RedisURL(), redis.WithKeyPrefix(prefix), redis.WithHoldback(holdback))
	defer s2.Close()
	ctx := ctxT(t, 2*time.Minute)
	holder, _ := leasehold.New(s1, leasehold.WithOwner("holder"))
	waiter, _ := leasehold.New(s2, leasehold.WithOwner("waiter"))

	// Some history first (Acquire waits out the fresh server's hold-back).
	var maxToken uint64
	for i := 0; i < 5; i++ {
		l, err := holder.Acquire(ctx, "job", leasehold.TTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		maxToken = max(maxToken, l.Token())
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	l1, err := holder.Acquire(ctx, "job", leasehold.TTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	maxToken = max(maxToken, l1.Token())

	var mu sync.Mutex
	var waits []*leasehold.HeldError
	waiting := make(chan struct{}, 1)
	type result struct {
		l   *leasehold.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := waiter.Acquire(ctx, "job", leasehold.TTL(ttl), leasehold.OnWait(func(he *leasehold.HeldError) {
			mu.Lock()
			waits = append(waits, he)
			mu.Unlock()
			select {
			case waiting <- struct{}{}:
			default:
			}
		}))
		got <- result{l, err}
	}()
	select {
	case <-waiting:
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter never found the lease held")
	}

	srv.Restart()

	select {
	case <-l1.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the holder did not notice that its lease was gone")
	}
	if !errors.Is(l1.Err(), leasehold.ErrLost) {
		t.Errorf("holder's Err = %v, want ErrLost", l1.Err())
	}
	believed := l1.Deadline().Round(0) // the holder's last local deadline, as wall time

	var r result
	select {
	case r = <-got:
	case <-time.After(60 * time.Second):
		t.Fatal("the waiter did not get the lease within 60s of the restart")
	}
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	defer r.l.Release(ctx)
	t.Logf("old holder believed until %s; new grant at %s (server clock), token %d (max before %d); waits: %v",
		believed.Format(time.StampMicro), r.l.Acquired().Format(time.StampMicro), r.l.Token(), maxToken, describeWaits(waits))
	if !r.l.Acquired().After(believed) {
		t.Errorf("new grant at %s (server clock), while the old holder believed it held the lease until %s",
			r.l.Acquired().Format(time.StampMicro), believed.Format(time.StampMicro))
	}
	if r.l.Token() <= maxToken {
		t.Errorf("token after the restart %d, want > %d", r.l.Token(), maxToken)
	}
	// The waiter waits in the store's queue (Client.Acquire uses
	// AcquireWait), so OnWait hears only of the first holder; the grant
	// itself shows the hold-back: not before its end, by the server clock.
	st, err := s2.ServerState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.HoldbackUntil.IsZero() || r.l.Acquired().Before(st.HoldbackUntil) {
		t.Errorf("new grant at %s, hold-back until %s: the waiter was not held back",
			r.l.Acquired().Format(time.StampMicro), st.HoldbackUntil.Format(time.StampMicro))
	}
}

func describeWaits(ws []*leasehold.HeldError) []string {
	var out []string
	for _, w := range ws {
		out = append(out, fmt.Sprintf("%s/%d/%s", w.Owner, w.Token, w.Remaining))
	}
	return out
}

// TestDurableRestart: with appendonly yes and appendfsync always nothing
// acknowledged is lost, so leases and counters survive a restart; on a
// server declared a single node never replicated (WithNeverReplicated)
// the store does not hold back after a restart that kept its marker. A
// first use of a server started just now does hold back (from the
// server's start): its marker is missing, as after a lost data set.
func TestDurableRestart(t *testing.T) {
	srv := enginetest.StartRedis(t, "--appendonly", "yes", "--appendfsync", "always")
	prefix := uniquePrefix(t)
	s := open(t, srv.RedisURL()+"?never_replicated=true", redis.WithKeyPrefix(prefix), redis.WithHoldback(5*time.Second))
	defer s.Close()
	ctx := ctxT(t, 2*time.Minute)
	st, err := s.ServerState(ctx)
	if err != nil || !st.Durable || st.HoldbackUntil.IsZero() {
		t.Fatalf("ServerState of a fresh durable server = %+v, %v; want Durable and a hold-back from its start (no marker yet)", st, err)
	}
	var last uint64
	for i := 0; i < 5; i++ {
		var rec leasehold.Record
		eventually(t, "counter grant", func() (err error) {
			rec, err = s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "counter", Owner: "a", TTL: time.Minute})
			return err
		})
		last = rec.Token
		if err := s.Release(ctx, "counter", "a", rec.Token); err != nil {
			t.Fatal(err)
		}
	}
	held, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "held", Owner: "h", TTL: time.Minute, Data: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}

	srv.Restart()

	eventually(t, "renew after restart", func() error { return s.Renew(ctx, "held", "h", held.Token, time.Minute) })
	got, err := s.Get(ctx, "held")
	if err != nil || got.Owner != "h" || got.Token != held.Token || string(got.Data) != "x" {
		t.Errorf("held lease after a durable restart = %+v, %v", got, err)
	}
	rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "counter", Owner: "b", TTL: time.Minute})
	if err != nil {
		t.Fatalf("TryAcquire after a durable restart: %v (want no hold-back)", err)
	}
	if rec.Token <= last {
		t.Errorf("counter token after restart %d, want > %d", rec.Token, last)
	}
	st2, err := s.ServerState(ctx)
	if err != nil || st2.RunID == st.RunID || !st2.Durable {
		t.Errorf("ServerState after restart = %+v, %v; want a new run id, durable", st2, err)
	}
	if _, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "held", Owner: "other", TTL: time.Minute}); !errors.Is(err, leasehold.ErrHeld) {
		t.Errorf("another owner after restart: %v, want ErrHeld", err)
	}
}

// TestOwnGrantBelowFloor: a retried acquire whose grant was made before a
// restart was noticed does not get it back (its token is below the new
// floor), and is not told "held" either: the grant is the caller's own, so
// that would be a definite refusal of a request that took effect (go-redis
// resending the script on a new connection can produce exactly this inside
// one TryAcquire). Everyone else is still refused: the grant stands.
func TestOwnGrantBelowFloor(t *testing.T) {
	srv := enginetest.StartRedis(t, "--appendonly", "yes", "--appendfsync", "always")
	prefix := uniquePrefix(t)
	// Declared never replicated: no hold-back after the restart.
	// (The first use of the fresh server holds back from its start.)
	s := open(t, srv.RedisURL(), redis.WithKeyPrefix(prefix), redis.WithNeverReplicated(), redis.WithHoldback(3*time.Second))
	defer s.Close()
	ctx := ctxT(t, 2*time.Minute)
	req := leasehold.AcquireRequest{Name: "n", Owner: "a", RequestID: "r1", TTL: time.Minute}
	var rec leasehold.Record
	eventually(t, "the first grant", func() (err error) {
		rec, err = s.TryAcquire(ctx, req)
		return err
	})

	srv.Restart()

	// The store notices the restart (and raises the floor) at its next
	// TryAcquire after reconnecting.
	eventually(t, "a TryAcquire after the restart", func() error {
		_, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "other", Owner: "b", TTL: time.Minute})
		return err
	})
	_, retry := s.TryAcquire(ctx, req)
	if retry == nil || errors.Is(retry, leasehold.ErrHeld) || !strings.Contains(retry.Error(), "below the token floor") {
		t.Fatalf("retry of a grant made before the restart: %v; want an error that is not ErrHeld", retry)
	}
	var he *leasehold.HeldError
	if _, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "n", Owner: "c", TTL: time.Minute}); !errors.As(err, &he) || he.Owner != "a" || he.Token != rec.Token {
		t.Fatalf("another owner after the restart: %v; want held by a with token %d", err, rec.Token)
	}
}

// TestWatchAcrossRestart: when the subscription comes back after a lost
// connection every watcher is woken (a release may have been missed), and
// releases are delivered again afterwards.
func TestWatchAcrossRestart(t *testing.T) {
	srv := enginetest.StartRedis(t)
	prefix := uniquePrefix(t)
	s := open(t, srv.RedisURL(), redis.WithKeyPrefix(prefix), redis.WithHoldback(0))
	defer s.Close()
	ctx := ctxT(t, 2*time.Minute)
	ch, err := s.Watch(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	select { // the first subscription's notification, if any
	case <-ch:
	default:
	}
	srv.Restart()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatal("no notification within 30s of the subscription coming back")
	}
	// The restart lost the Watch's interest marker; the subscriber set it
	// again before it woke the watcher (not at the Watch's next refresh,
	// up to 3s later), so the release below is published.
	opt, err := goredis.ParseURL(srv.RedisURL())
	if err != nil {
		t.Fatal(err)
	}
	raw := goredis.NewClient(opt)
	defer raw.Close()
	if n, err := raw.Exists(ctx, prefix+"{w}:i").Result(); err != nil || n != 1 {
		t.Fatalf("interest marker after the subscription came back: %d, %v; want set", n, err)
	}
	var rec leasehold.Record
	eventually(t, "acquire after restart", func() (err error) {
		rec, err = s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "w", Owner: "a", TTL: time.Minute})
		return err
	})
	select { // drop a notification that may be pending from the reconnect
	case <-ch:
	default:
	}
	if err := s.Release(ctx, "w", "a", rec.Token); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no notification of a release after the restart")
	}
}

// TestRestartMarkerKept: an AOF with appendfsync everysec keeps the marker
// across a restart but may lose the last second of writes, so the store
// must notice the new run id. The first TryAcquire after the restart reads
// its cached marker, and its script goes out on a newly dialled connection
// to the restarted server: that grant must be undone and reported as held
// back (the post-grant check), not handed out.
func TestRestartMarkerKept(t *testing.T) {
	srv := enginetest.StartRedis(t, "--appendonly", "yes", "--appendfsync", "everysec")
	const holdback = 2 * time.Second
	s := open(t, srv.RedisURL(), redis.WithKeyPrefix(uniquePrefix(t)), redis.WithHoldback(holdback))
	defer s.Close()
	ctx := ctxT(t, 2*time.Minute)
	c, _ := leasehold.New(s, leasehold.WithOwner("a"))
	l, err := c.Acquire(ctx, "before", leasehold.TTL(time.Minute), leasehold.NoKeepalive()) // waits out the fresh server's hold-back
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.ServerState(ctx)
	if err != nil || st.Durable {
		t.Fatalf("ServerState = %+v, %v; want not durable", st, err)
	}
	time.Sleep(1500 * time.Millisecond) // let everysec write the AOF

	srv.Restart()

	var he *leasehold.HeldError
	eventually(t, "first TryAcquire after the restart", func() error {
		_, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "after", Owner: "b", TTL: time.Minute})
		if err == nil {
			return nil
		}
		if errors.As(err, &he) {
			return nil
		}
		return err
	})
	if he == nil || he.Owner != redis.HoldbackOwner {
		t.Fatalf("TryAcquire right after a restart: %+v, want a hold-back", he)
	}
	if _, err := s.Get(ctx, "after"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Errorf("a grant made during the hold-back was left behind: %v", err)
	}
	st2, err := s.ServerState(ctx)
	if err != nil || st2.RunID == st.RunID || st2.TokenFloor <= st.TokenFloor {
		t.Errorf("ServerState after restart = %+v, %v (before %+v)", st2, err, st)
	}
	if got, err := s.Get(ctx, "before"); err != nil || got.Token != l.Token() {
		t.Errorf("lease kept in the AOF = %+v, %v", got, err)
	}
	time.Sleep(he.Remaining + 10*time.Millisecond)
	rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "after", Owner: "b", TTL: time.Minute})
	if err != nil || rec.Token < st2.TokenFloor {
		t.Errorf("TryAcquire after the hold-back = %+v, %v; want a token >= %d", rec, err, st2.TokenFloor)
	}
}

// TestMarkerDeleted: if the marker disappears (deleted, evicted, or lost
// with the data) every client's next TryAcquire notices in its script,
// checks again and raises the floor.
func TestMarkerDeleted(t *testing.T) {
	url := sharedURL(t)
	prefix := uniquePrefix(t)
	a := open(t, url, redis.WithKeyPrefix(prefix), redis.WithHoldback(0))
	defer a.Close()
	b := open(t, url, redis.WithKeyPrefix(prefix), redis.WithHoldback(0))
	defer b.Close()
	ctx := ctxT(t, time.Minute)
	st, err := a.ServerState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	opt, _ := goredis.ParseURL(url)
	rdb := goredis.NewClient(opt)
	defer rdb.Close()
	if err := rdb.Del(ctx, prefix+"epoch").Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond)
	for _, s := range []*redis.Store{a, b} {
		rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "m", Owner: "o", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		st2, err := s.ServerState(ctx)
		if err != nil || st2.TokenFloor <= st.TokenFloor || rec.Token < st2.TokenFloor {
			t.Errorf("after the marker was deleted: token %d, state %+v (before %+v), %v", rec.Token, st2, st, err)
		}
		if err := s.Release(ctx, "m", "o", rec.Token); err != nil {
			t.Fatal(err)
		}
	}
}

// TestServerStateEvicts: a server that may evict keys is reported.
func TestServerStateEvicts(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		evicts bool
	}{
		{[]string{"--maxmemory", "100mb", "--maxmemory-policy", "volatile-lru"}, true},
		{[]string{"--maxmemory", "100mb", "--maxmemory-policy", "noeviction"}, false},
		{[]string{"--maxmemory", "0", "--maxmemory-policy", "allkeys-lru"}, false},
	} {
		srv := enginetest.StartRedis(t, tc.args...)
		s := open(t, srv.RedisURL(), redis.WithHoldback(0))
		st, err := s.ServerState(ctxT(t, time.Minute))
		if err != nil || st.Evicts != tc.evicts {
			t.Errorf("%v: ServerState = %+v, %v; want Evicts %v", tc.args, st, err, tc.evicts)
		}
		s.Close()
	}
}
