package watchset

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

func TestNotifyCoalescesAndCloses(t *testing.T) {
	var s Set
	ctx, cancel := context.WithCancel(context.Background())
	a, _ := s.Add(ctx, "a")
	b, _ := s.Add(context.Background(), "b")
	s.Notify("a")
	s.Notify("a") // coalesces: one value buffered, no blocking
	if len(a) != 1 || len(b) != 0 {
		t.Fatalf("buffered a=%d b=%d, want 1 and 0", len(a), len(b))
	}
	s.NotifyAll()
	if len(b) != 1 {
		t.Fatal("NotifyAll did not reach b")
	}
	cancel()
	<-a // the buffered value
	select {
	case _, open := <-a:
		if open {
			t.Fatal("a still open after its context ended")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a not closed after its context ended")
	}
	if s.Len() != 1 {
		t.Fatalf("%d names watched, want 1", s.Len())
	}
	s.Close()
	<-b
	if _, open := <-b; open {
		t.Fatal("b open after Close")
	}
	if _, err := s.Add(context.Background(), "c"); !errors.Is(err, leasehold.ErrClosed) {
		t.Fatalf("Add after Close: %v", err)
	}
}
