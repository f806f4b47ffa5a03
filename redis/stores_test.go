package redis_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/redis"
	"github.com/leasehold/leasehold/stores"
)

// TestStoresURL: the stores package opens redis:// URLs with leasehold's
// own parameters.
func TestStoresURL(t *testing.T) {
	for _, scheme := range []string{"redis", "rediss"} {
		if !slices.Contains(stores.Schemes(), scheme) {
			t.Errorf("scheme %q not registered: %v", scheme, stores.Schemes())
		}
	}
	ctx := ctxT(t, time.Minute)
	prefix := uniquePrefix(t)
	s, err := stores.Open(ctx, sharedURL(t)+"?holdback=0s&prefix="+prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rs, ok := s.(*redis.Store)
	if !ok || rs.KeyPrefix() != prefix || rs.Holdback() != 0 {
		t.Fatalf("opened %T %+v", s, s)
	}
	rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "via-url", Owner: "a", TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, "via-url", "a", rec.Token); err != nil {
		t.Fatal(err)
	}
	if _, err := stores.Open(ctx, "redis://127.0.0.1:1/0?holdback=x"); !errors.Is(err, leasehold.ErrInvalid) {
		t.Errorf("bad holdback through stores.Open: %v, want ErrInvalid", err)
	}
	// After Close every operation reports ErrClosed.
	s.Close()
	if _, err := s.Get(ctx, "via-url"); !errors.Is(err, leasehold.ErrClosed) {
		t.Errorf("Get after Close: %v, want ErrClosed", err)
	}
	if _, err := rs.Watch(ctx, "via-url"); !errors.Is(err, leasehold.ErrClosed) {
		t.Errorf("Watch after Close: %v, want ErrClosed", err)
	}
}
