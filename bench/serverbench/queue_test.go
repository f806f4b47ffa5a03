package serverbench

import (
	"context"
	"os"
	"strconv"
	"testing"
)

// TestQueue queues LEASEHOLD_QUEUE waiters (default 3,000; 100,000 for the
// documented figure) on a durable engine, in process on one name and
// through a RESP server with a waiters quota of that many on 1,000 names,
// and checks that up to 100 releases of one name hand its lease to the
// head of its queue, in order, while the rest wait.
func TestQueue(t *testing.T) {
	n := 3000
	if s := os.Getenv("LEASEHOLD_QUEUE"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	for _, overRESP := range []bool{false, true} {
		res, err := MeasureQueue(context.Background(), t.TempDir(), n, 100, overRESP)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s", res)
		if res.Handoffs != min(res.OnName, 100) {
			t.Fatalf("%d handoffs, want %d", res.Handoffs, min(res.OnName, 100))
		}
	}
}
