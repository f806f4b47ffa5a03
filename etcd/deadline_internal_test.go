package etcd

import (
	"context"
	"errors"
	"testing"

	"github.com/leasehold/leasehold/storetest"
)

// etcd gets the deadline with the call and can answer with its own
// timeout before ctx's timer has run: fail still says
// context.DeadlineExceeded, and only then.
func TestFailAfterDeadline(t *testing.T) {
	s := &Store{}
	etcdTimeout := errors.New("etcdserver: request timed out")
	if err := s.fail(storetest.PassedDeadline(), "acquire", etcdTimeout); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("etcd's timeout after the deadline: %v, want context.DeadlineExceeded", err)
	}
	if err := s.fail(context.Background(), "acquire", etcdTimeout); errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("etcd's timeout without a deadline: %v, want a plain error", err)
	}
}
