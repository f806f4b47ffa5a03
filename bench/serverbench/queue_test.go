package serverbench

import (
	"context"
	"os"
	"strconv"
	"testing"
)

// TestQueue queues LEASEHOLD_QUEUE waiters (default 5,000; 100,000 for the
// documented figure) on one name of a durable engine and checks that 100
// releases hand the lease to the head of the queue, in order, while the
// rest wait.
func TestQueue(t *testing.T) {
	n := 5000
	if s := os.Getenv("LEASEHOLD_QUEUE"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	res, err := MeasureQueue(context.Background(), t.TempDir(), n, 100)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", res)
	if res.Handoffs != min(n, 100) {
		t.Fatalf("%d handoffs, want %d", res.Handoffs, min(n, 100))
	}
}
