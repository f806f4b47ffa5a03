package serverbench

import (
	"context"
	"os"
	"strconv"
	"testing"
)

// TestScale holds LEASEHOLD_SCALE leases (default 20,000; 1,000,000 for the
// documented figure) in a durable engine and reports the memory per lease
// and the restart time.
func TestScale(t *testing.T) {
	n := 20000
	if s := os.Getenv("LEASEHOLD_SCALE"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	dir := t.TempDir()
	res, err := MeasureScale(context.Background(), dir, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", res)
	if res.Recovered != n {
		t.Fatalf("recovered %d leases, want %d", res.Recovered, n)
	}
}
