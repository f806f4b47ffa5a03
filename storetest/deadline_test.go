package storetest

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The deadline check catches a store that reports a deadline in its own
// words, and passes one that says context.DeadlineExceeded.
func TestDeadlineCheckCatches(t *testing.T) {
	slow := func(answer error) func(ctx context.Context, _ int) error {
		return func(ctx context.Context, _ int) error {
			d, _ := ctx.Deadline()
			if time.Until(d) > 500*time.Microsecond {
				return nil // a call that beat its deadline
			}
			time.Sleep(time.Until(d))
			return answer
		}
	}
	never := func(error) bool { return false }
	_, deadlines, other := countDeadlines(slow(context.DeadlineExceeded), never)
	if deadlines == 0 || len(other) != 0 {
		t.Errorf("a store answering context.DeadlineExceeded: %d deadlines, %d other errors; want some and none", deadlines, len(other))
	}
	_, _, other = countDeadlines(slow(errors.New("read tcp: i/o timeout")), never)
	if len(other) == 0 {
		t.Error(`a store answering "i/o timeout" at its deadline passed the check`)
	}
}
