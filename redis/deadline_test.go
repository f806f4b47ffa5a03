package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/redis"
	"github.com/leasehold/leasehold/storetest"
)

// go-redis notices a deadline by the connection's I/O deadline, taken from
// ctx, and says "i/o timeout", possibly before ctx's timer has run: the
// store still answers context.DeadlineExceeded, and a wait's failure then
// leaves the queue as for an ended context.
func TestDeadlinePassedIsContextError(t *testing.T) {
	s := open(t, sharedURL(t), redis.WithKeyPrefix(uniquePrefix(t)))
	defer s.Close()
	ioTimeout := errors.New("read tcp 127.0.0.1:1->127.0.0.1:2: i/o timeout")
	past := storetest.PassedDeadline()
	if err := s.Translate(past, "acquire", ioTimeout); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("an I/O timeout after the deadline: %v, want context.DeadlineExceeded", err)
	}
	if err := s.Translate(context.Background(), "acquire", ioTimeout); errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("an I/O timeout without a deadline: %v, want a plain error", err)
	}
	req := leasehold.AcquireRequest{Name: "deadline", Owner: "o", RequestID: "r", TTL: time.Minute}
	if err := s.WaitFailed(past, req, "entry", ioTimeout); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a wait failed after its deadline: %v, want context.DeadlineExceeded", err)
	}
}
