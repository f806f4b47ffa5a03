package redis_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/redis"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// TestFreshReplicaRefusedFirst (red team): a replica of a
// primary the store never used, given as a plain redis:// store, was
// answered "loading the function library …: READONLY You can't write
// against a read only replica" (exit 70) instead of the refusal naming
// the primary (exit 64); a writable replica (replica-read-only no) got
// the store's function library written onto it before it was refused.
// The role check now comes before the library is loaded: both are
// refused naming the primary, and FUNCTION LIST on the writable one stays
// empty.
func TestFreshReplicaRefusedFirst(t *testing.T) {
	p := enginetest.StartRedis(t)
	primary := fmt.Sprintf("127.0.0.1:%d", p.Port)
	ctx := ctxT(t, 2*time.Minute)
	for _, readOnly := range []string{"yes", "no"} {
		r := enginetest.StartRedis(t, "--replicaof", "127.0.0.1", fmt.Sprint(p.Port), "--replica-read-only", readOnly)
		cr := client(t, r)
		waitInfo(ctx, t, cr, "master_link_status:up")
		s, err := redis.Open(ctx, r.RedisURL(), redis.WithKeyPrefix(uniquePrefix(t)), redis.WithHoldback(0))
		if s != nil {
			s.Close()
		}
		if !errors.Is(err, leasehold.ErrInvalid) || !strings.Contains(err.Error(), primary) || !strings.Contains(err.Error(), "role:slave") {
			t.Errorf("Open(replica, replica-read-only %s): %v; want an InvalidError naming the primary %s", readOnly, err, primary)
		}
		libs, err := cr.Do(ctx, "FUNCTION", "LIST").Slice()
		if err != nil {
			t.Fatal(err)
		}
		if len(libs) != 0 {
			t.Errorf("replica-read-only %s: FUNCTION LIST on the replica has %d libraries after the refused Open, want none", readOnly, len(libs))
		}
	}
	// The primary was never used by a store: nothing reached it either.
	libs, err := client(t, p).Do(ctx, "FUNCTION", "LIST").Slice()
	if err != nil || len(libs) != 0 {
		t.Errorf("FUNCTION LIST on the primary: %d libraries, %v; want none", len(libs), err)
	}
}
