package redis_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/randid"
	"github.com/leasehold/leasehold/redis"
	"github.com/leasehold/leasehold/storetest"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// sharedURL returns the shared test server from scripts/engines.sh, or
// starts a private one for this test (skipping when Redis is not installed).
func sharedURL(t testing.TB) string {
	if u := os.Getenv("LEASEHOLD_TEST_REDIS"); u != "" {
		return u
	}
	return enginetest.StartRedis(t).RedisURL()
}

// uniquePrefix returns a key prefix no other test run uses.
func uniquePrefix(t testing.TB) string {
	return "lhtest:" + randid.Hex(6) + ":"
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func open(t testing.TB, url string, opts ...redis.Option) *redis.Store {
	t.Helper()
	s, err := redis.Open(ctxT(t, 30*time.Second), url, opts...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

// TestConformance runs the whole suite. The hold-back is off here: a
// fresh test server's short uptime would otherwise hold back the first
// grants (TestHoldback covers it).
func TestConformance(t *testing.T) {
	url, prefix := sharedURL(t), uniquePrefix(t)
	openStore := func(t testing.TB) leasehold.Store {
		return open(t, url, redis.WithKeyPrefix(prefix), redis.WithHoldback(0))
	}
	opt, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := goredis.NewClient(opt)
	defer rdb.Close()
	storetest.Run(t, storetest.Harness{
		Open: openStore,
		Reopen: func(t testing.TB, s leasehold.Store) leasehold.Store {
			s.Close()
			return openStore(t)
		},
		Queued: func(ctx context.Context, _ leasehold.Store, name, owner string) (bool, error) {
			return queuedOwner(ctx, rdb, prefix, name, owner)
		},
		WaiterLiveness: redis.DefaultLiveness,
	})
}

// queuedOwner reports whether a waiter of owner is in name's queue, as
// Redis has it (the keys are described in docs/stores/redis.md).
func queuedOwner(ctx context.Context, rdb *goredis.Client, prefix, name, owner string) (bool, error) {
	tag := strings.NewReplacer("{", "\x01", "}", "\x02").Replace(name)
	base := prefix + "{" + tag + "}"
	reqs, err := rdb.HGetAll(ctx, base+":w").Result()
	if err != nil {
		return false, err
	}
	for k, v := range reqs {
		id, ok := strings.CutPrefix(k, "r:")
		if !ok || !strings.Contains(v, "\x00"+owner+"\x00") {
			continue
		}
		if err := rdb.ZScore(ctx, base+":q", id).Err(); err == nil {
			return true, nil
		} else if !errors.Is(err, goredis.Nil) {
			return false, err
		}
	}
	return false, nil
}

func TestOpenBadInput(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	for _, u := range []string{
		"redis://127.0.0.1:1/0?holdback=soon",
		"redis://127.0.0.1:1/0?holdback=-1s",
		"redis://127.0.0.1:1/0?holdback=100h",
		"redis://127.0.0.1:1/x",
		"redis://127.0.0.1:1/0?nonsense=1",
		"redis://127.0.0.1:1/0?prefix=a{b",
		"redis://127.0.0.1:1/0?prefix=",
		"http://127.0.0.1:1/0",
		"redis://user:secret@127.0.0.1:bad/0",
		"://",
	} {
		_, err := redis.Open(ctx, u)
		var ie *leasehold.InvalidError
		if !errors.Is(err, leasehold.ErrInvalid) || !errors.As(err, &ie) {
			t.Errorf("Open(%q) = %v, want an *InvalidError", u, err)
			continue
		}
		if contains(err.Error(), "secret") {
			t.Errorf("Open(%q) error shows the password: %v", u, err)
		}
	}
	for _, o := range []redis.Option{redis.WithHoldback(-time.Second), redis.WithKeyPrefix(""), redis.WithKeyPrefix("a}")} {
		if _, err := redis.New(nil); !errors.Is(err, leasehold.ErrInvalid) {
			t.Errorf("New(nil) = %v", err)
		}
		if _, err := redis.Open(ctx, "redis://127.0.0.1:1/0", o); !errors.Is(err, leasehold.ErrInvalid) {
			t.Errorf("Open with a bad option = %v, want ErrInvalid", err)
		}
	}
	// A well-formed URL of a server that is not there is not invalid input.
	if _, err := redis.Open(ctx, "redis://127.0.0.1:1/0?holdback=5s"); err == nil || errors.Is(err, leasehold.ErrInvalid) {
		t.Errorf("Open of an unreachable server = %v, want a connection error", err)
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
