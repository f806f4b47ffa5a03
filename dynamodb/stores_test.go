package dynamodb_test

import (
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/dynamodb"
	"github.com/leasehold/leasehold/internal/enginetest"
	"github.com/leasehold/leasehold/stores"
)

// TestStoresURL: stores.Open and stores.Init know the dynamodb scheme.
func TestStoresURL(t *testing.T) {
	u := freshURL(t, enginetest.DynamoDBURL(t), "create", "false")
	if err := stores.Init(bg(t), u); err != nil {
		t.Fatalf("stores.Init: %v", err)
	}
	s, err := stores.Open(bg(t), u)
	if err != nil {
		t.Fatalf("stores.Open: %v", err)
	}
	defer s.Close()
	if _, ok := s.(*dynamodb.Store); !ok {
		t.Fatalf("stores.Open returned %T", s)
	}
	if _, err := s.TryAcquire(bg(t), req("x", "a", time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := stores.Open(bg(t), "dynamodb://x"); !errors.Is(err, leasehold.ErrInvalid) {
		t.Errorf("stores.Open with a bad table name: %v, want ErrInvalid", err)
	}
}
