package cli

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestFitConnCaps: default connection caps that add up to more than the
// open-file limit (less what the server needs for itself) are lowered in
// proportion, with a log line; caps given explicitly are kept, with a
// warning; a port not served needs nothing.
func TestFitConnCaps(t *testing.T) {
	defaults := func() *serveOptions {
		return &serveOptions{addr: "127.0.0.1:0", respAddr: "127.0.0.1:0",
			httpMaxConns: 10000, respMaxConns: 10000, httpMaxConnsPerAddr: 1000, respMaxConnsPerAddr: 1000}
	}
	for _, c := range []struct {
		name               string
		limit              uint64
		given, noResp      bool
		wantHTTP, wantRESP int
		wantPerAddr        int
		log                string
	}{
		{name: "room", limit: 1 << 20, wantHTTP: 10000, wantRESP: 10000, wantPerAddr: 1000},
		{name: "unknown limit", limit: 0, wantHTTP: 10000, wantRESP: 10000, wantPerAddr: 1000},
		{name: "the review's 20,000", limit: 20000, wantHTTP: 9744, wantRESP: 9744, wantPerAddr: 1000, log: "connection caps lowered"},
		{name: "1,024", limit: 1024, wantHTTP: 256, wantRESP: 256, wantPerAddr: 256, log: "connection caps lowered"},
		{name: "one port", limit: 10600, noResp: true, wantHTTP: 10000, wantRESP: 10000, wantPerAddr: 1000},
		{name: "given", limit: 20000, given: true, wantHTTP: 10000, wantRESP: 10000, wantPerAddr: 1000, log: "more than the open-file limit"},
	} {
		o := defaults()
		o.capsGiven = c.given
		if c.noResp {
			o.respAddr = ""
		}
		var buf bytes.Buffer
		o.fitConnCaps(c.limit, slog.New(slog.NewTextHandler(&buf, nil)))
		if o.httpMaxConns != c.wantHTTP || o.respMaxConns != c.wantRESP || o.httpMaxConnsPerAddr != c.wantPerAddr || o.respMaxConnsPerAddr != c.wantPerAddr {
			t.Errorf("%s: caps %d/%d, per address %d/%d; want %d/%d, %d", c.name, o.httpMaxConns, o.respMaxConns,
				o.httpMaxConnsPerAddr, o.respMaxConnsPerAddr, c.wantHTTP, c.wantRESP, c.wantPerAddr)
		}
		if got := buf.String(); (c.log == "") != (got == "") || !strings.Contains(got, c.log) {
			t.Errorf("%s: log %q, want a line with %q", c.name, got, c.log)
		}
		if sum := uint64(o.httpMaxConns + o.respMaxConns); c.log == "connection caps lowered" && sum+fdReserve > c.limit && sum > c.limit/2 {
			t.Errorf("%s: caps %d + %d leave less than the reserve (%d) or half the limit %d", c.name, o.httpMaxConns, o.respMaxConns, fdReserve, c.limit)
		}
	}
}
