package redis_test

import (
	"errors"
	"math"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/redis"
)

func TestFencedSet(t *testing.T) {
	opt, err := goredis.ParseURL(sharedURL(t))
	if err != nil {
		t.Fatal(err)
	}
	rdb := goredis.NewClient(opt)
	defer rdb.Close()
	ctx := ctxT(t, time.Minute)
	key := uniquePrefix(t) + "resource"
	if _, _, err := redis.FencedGet(ctx, rdb, key); !errors.Is(err, leasehold.ErrNotFound) {
		t.Errorf("FencedGet of nothing: %v, want ErrNotFound", err)
	}
	steps := []struct {
		value string
		token uint64
		ok    bool
	}{
		{"a", 5, true}, {"b", 7, true}, {"stale", 6, false}, {"c", 7, true}, {"d", 10, true}, {"stale", 9, false},
		{"big", math.MaxUint64 - 1, true}, {"stale", 1 << 62, false}, {"max", math.MaxUint64, true},
	}
	for _, st := range steps {
		err := redis.FencedSet(ctx, rdb, key, st.value, st.token)
		switch {
		case st.ok && err != nil:
			t.Errorf("FencedSet(%q, %d): %v", st.value, st.token, err)
		case !st.ok && (!errors.Is(err, redis.ErrFenced) || !errors.Is(err, leasehold.ErrLost) || !errors.Is(err, leasehold.ErrNotHeld)):
			t.Errorf("FencedSet(%q, %d) = %v, want ErrFenced", st.value, st.token, err)
		}
	}
	v, tok, err := redis.FencedGet(ctx, rdb, key)
	if err != nil || v != "max" || tok != math.MaxUint64 {
		t.Errorf("FencedGet = %q, %d, %v; want max, MaxUint64", v, tok, err)
	}
	if err := redis.FencedSet(ctx, rdb, key, "x", 0); !errors.Is(err, leasehold.ErrInvalid) {
		t.Errorf("FencedSet with token 0: %v, want ErrInvalid", err)
	}
}

// TestFencedSetWithLeases: a holder that lost its lease to expiry cannot
// overwrite the new holder's write.
func TestFencedSetWithLeases(t *testing.T) {
	url := sharedURL(t)
	s := open(t, url, redis.WithKeyPrefix(uniquePrefix(t)), redis.WithHoldback(0))
	defer s.Close()
	opt, _ := goredis.ParseURL(url)
	rdb := goredis.NewClient(opt)
	defer rdb.Close()
	ctx := ctxT(t, time.Minute)
	key := s.KeyPrefix() + "data"
	old, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "res", Owner: "old", TTL: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // old stalls; its lease expires
	cur, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "res", Owner: "new", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := redis.FencedSet(ctx, rdb, key, "from new", cur.Token); err != nil {
		t.Fatal(err)
	}
	if err := redis.FencedSet(ctx, rdb, key, "from old", old.Token); !errors.Is(err, redis.ErrFenced) {
		t.Errorf("the stale holder's write: %v, want ErrFenced", err)
	}
	if v, _, _ := redis.FencedGet(ctx, rdb, key); v != "from new" {
		t.Errorf("stored %q, want the new holder's write", v)
	}
}
