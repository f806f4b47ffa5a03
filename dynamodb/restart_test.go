package dynamodb_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/dynamodb"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// TestDynaliteRestart: dynalite keeps its tables in memory, so a restart
// loses the table with every lease in it. Holders then lose their leases:
// until the table is back their renewals fail, and once it is recreated
// the store refuses them. Token counters start again at 1 — a property of
// the emulator's lost data; a DynamoDB table does not lose acknowledged
// writes.
func TestDynaliteRestart(t *testing.T) {
	srv := enginetest.StartDynalite(t)
	u := fmt.Sprintf("dynamodb://lh_restart?endpoint=%s&region=us-east-1&max_clock_skew=5ms", srv.DynamoDBEndpoint())
	s := open(t, u)
	defer s.Close()
	ctx := bg(t)
	var last uint64
	for i := 0; i < 5; i++ {
		rec, err := s.TryAcquire(ctx, req("counter", "a", time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		last = rec.Token
		if err := s.Release(ctx, "counter", "a", rec.Token); err != nil {
			t.Fatal(err)
		}
	}
	c, _ := leasehold.New(s, leasehold.WithOwner("holder"))
	const ttl = 6 * time.Second
	l, err := c.TryAcquire(ctx, "job", leasehold.TTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	srv.Restart()
	if err := dynamodb.Init(ctx, u); err != nil { // as an operator (or the next Open) would
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(ttl + 10*time.Second):
		t.Fatal("the holder still believes it holds its lease after the store lost it")
	}
	if !errors.Is(l.Err(), leasehold.ErrLost) {
		t.Errorf("lease error %v, want ErrLost", l.Err())
	}
	t.Logf("lease lost %s after the restart: %v", time.Since(t0).Round(time.Millisecond), l.Err())
	if _, err := s.Get(ctx, "job"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Errorf("Get after the restart: %v, want ErrNotFound", err)
	}
	rec, err := s.TryAcquire(ctx, req("counter", "b", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if rec.Token != 1 {
		t.Errorf("token after the emulator lost its data = %d, want 1 (the counter went with the table)", rec.Token)
	}
	t.Logf("token of a name before the restart %d, after %d (dynalite lost the table)", last, rec.Token)
}
