package server

import (
	"sort"
	"testing"
)

// TestTableParity: the operations the HTTP and RESP APIs both have need
// the same access on both (each API's table names its operations: httpOps,
// respOps), and the ones issue 15 names are in both.
func TestTableParity(t *testing.T) {
	h, r := httpOps(), respOps()
	var shared []string
	for op, ha := range h {
		ra, ok := r[op]
		if !ok {
			continue
		}
		shared = append(shared, op)
		if ha != ra {
			t.Errorf("operation %s needs %v over HTTP but %v over RESP", op, ha, ra)
		}
	}
	sort.Strings(shared)
	for _, op := range []string{"lease.acquire", "lease.renew", "lease.release", "lease.get", "lease.list",
		"lease.forcerelease", "session.open", "session.keepalive", "session.close", "events.subscribe", "ready", "semaphore.acquire"} {
		_, inH := h[op]
		_, inR := r[op]
		if !inH || !inR {
			t.Errorf("operation %s: in the HTTP table %v, in the RESP table %v; want both", op, inH, inR)
		}
	}
	t.Logf("%d operations in both tables: %v", len(shared), shared)
}
