package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// TestListByteBounds (issue 26's review): a list of big leases is bounded
// in bytes, not only in leases: an HTTP page and an LH.SCAN page end once
// their leases come to listPageBytes (the rest on the next page), and
// LH.LIST refuses such a prefix (TOOMANY). Before, 20 unread LH.LIST of
// 2,000 leases of 64 KiB took a server to 4 GB, and 30 unread HTTP lists
// to 8 GB: each answer was built whole.
func TestListByteBounds(t *testing.T) {
	ts := newHTServer(t, HandlerOptions{})
	data := []byte(strings.Repeat("d", 64<<10))
	const n = 200 // 200 × 64 KiB ≈ 17 MiB as base64: more than one page
	for i := range n {
		_, err := ts.eng.Acquire(context.Background(), AcquireRequest{AcquireRequest: leasehold.AcquireRequest{
			Name: fmt.Sprintf("big/%04d", i), Owner: "o", TTL: time.Hour, Data: data}})
		if err != nil {
			t.Fatal(err)
		}
	}
	names, pages := htPages(t, ts, "", "prefix=big/", 0)
	if len(names) != n || pages < 2 {
		t.Errorf("HTTP: %d leases in %d pages, want all %d in at least 2 pages of at most %d bytes", len(names), pages, n, listPageBytes)
	}
	r := ts.do("GET", "/v1/leases?prefix=big/", "", "")
	if len(r.body) > 2*listPageBytes {
		t.Errorf("HTTP: a page of %d bytes, more than twice the page bound %d", len(r.body), listPageBytes)
	}

	_, addr := rtServe(t, ts.eng, RESPOptions{})
	c := rtDial(t, addr)
	reply := c.do("LH.LIST", "big/")
	rtExpect(t, "LH.LIST of 17 MiB of leases", reply[:min(len(reply), 120)], "-TOOMANY")
	got, cursor, scans := 0, "0", 0
	for {
		reply := c.do("LH.SCAN", "big/", cursor, "COUNT", "10000")
		scans++
		// rtShow: [$next [...]]; count the records by their names.
		got += strings.Count(reply, "big/")
		next := strings.TrimPrefix(strings.SplitN(reply, " ", 2)[0], "[$")
		if next == "0" || scans > 50 {
			break
		}
		cursor = next
	}
	if got != n || scans < 2 {
		t.Errorf("LH.SCAN: %d leases in %d pages, want all %d in at least 2", got, scans, n)
	}
}
