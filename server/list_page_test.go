package server

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// TestHTTPListPageCost: a page of 10 of 20,000 leases costs about the
// page, not every lease under the prefix (issue 27's red team, #3: a page
// of 10 of a million leases allocated 522 MB). Before the fix the
// handler copied and sorted all 20,000 (several MB per request); paging
// through them returns each lease once, in order.
func TestHTTPListPageCost(t *testing.T) {
	ts := newHTServer(t, HandlerOptions{})
	const total = 20000
	want := htFill(t, ts, "c/", total)
	ts.want(ts.do("GET", "/v1/leases?prefix=c/&limit=10", "", ""), 200, "") // warm up
	const runs = 5
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		r := ts.do("GET", "/v1/leases?prefix=c/&limit=10&after=c/00100", "", "")
		ts.want(r, 200, "")
		if ls := r.json["leases"].([]any); len(ls) != 10 || ls[0].(map[string]any)["name"] != "c/00101" || r.str("next") != "c/00110" {
			t.Fatalf("page after c/00100: %s", r.body)
		}
	}
	runtime.ReadMemStats(&after)
	// About 1 KB per lease listed would be 10 KB; the old handler's copy of
	// 20,000 records alone was over 3 MB.
	per := (after.TotalAlloc - before.TotalAlloc) / runs
	t.Logf("a page of 10 of %d leases: %d bytes allocated", total, per)
	if per > 1<<20 {
		t.Errorf("a page of 10 of %d leases allocated %d bytes, want under 1 MiB", total, per)
	}
	got, pages := htPages(t, ts, "", "prefix=c/", 997)
	if len(got) != total || pages != total/997+1 {
		t.Fatalf("%d names in %d pages, want %d in %d", len(got), pages, total, total/997+1)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("name %d of the pages is %s, want %s (each once, in order)", i, got[i], want[i])
		}
	}
}

// hiddenPager is a Backend without ListPage: listPage cuts its page from
// List.
type hiddenPager struct{ Backend }

// TestListPageMatchesList: the engine's ListPage gives the page that
// sorting List's answer and cutting it gives, for pages of every size,
// cursors between and on names, a keep that drops some names, and a
// prefix that matches only some; bad sizes are refused.
func TestListPageMatchesList(t *testing.T) {
	ts := newHTServer(t, HandlerOptions{})
	htFill(t, ts, "m/", 40)
	htFill(t, ts, "m/x", 7)
	htFill(t, ts, "n/", 5)
	ctx := context.Background()
	keep := func(name string) bool { return !strings.HasSuffix(name, "3") }
	for _, prefix := range []string{"", "m/", "m/x", "zz/"} {
		for _, after := range []string{"", "m/00007", "m/00007x", "m/x00002", "n/00004", "~"} {
			for _, n := range []int{1, 2, 3, 10, 39, 60, 100} {
				for ki, k := range []func(string) bool{nil, keep} {
					got, err := ts.eng.ListPage(ctx, prefix, after, n, k)
					if err != nil {
						t.Fatal(err)
					}
					want, err := listPage(ctx, hiddenPager{ts.eng}, prefix, after, n, k)
					if err != nil {
						t.Fatal(err)
					}
					if g, w := recNames(got), recNames(want); g != w {
						t.Errorf("prefix %q after %q n %d keep %d: %s, want %s", prefix, after, n, ki, g, w)
					}
				}
			}
		}
	}
	for _, b := range []Backend{ts.eng, hiddenPager{ts.eng}} {
		if _, err := listPage(ctx, b, "m/", "", 0, nil); err == nil {
			t.Errorf("%T: a page of 0 was not refused", b)
		}
	}
}

func recNames(recs []leasehold.Record) string {
	var b strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&b, "%s ", r.Name)
	}
	return b.String()
}

// TestRESPScanPageCost: LH.SCAN COUNT 10 of 20,000 leases costs about the
// page too (before the fix it read, copied and sorted all 20,000 per
// page), and a scan by pages returns each lease once, in order.
func TestRESPScanPageCost(t *testing.T) {
	e := rtEngine(t)
	const total = 20000
	var want []string
	for i := range total {
		name := fmt.Sprintf("s/%05d", i)
		if _, err := e.Acquire(context.Background(), AcquireRequest{AcquireRequest: leasehold.AcquireRequest{Name: name, Owner: "o", TTL: time.Hour}}); err != nil {
			t.Fatal(err)
		}
		want = append(want, name)
	}
	_, addr := rtServe(t, e, RESPOptions{})
	c := rtDial(t, addr)
	rtScan(t, c, "s/", "0", "COUNT", "10") // warm up
	const runs = 5
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		if next, names := rtScan(t, c, "s/", "0", "COUNT", "10"); len(names) != 10 || names[0] != "s/00000" || next == "0" {
			t.Fatalf("first page: %q, next %q", names, next)
		}
	}
	runtime.ReadMemStats(&after)
	per := (after.TotalAlloc - before.TotalAlloc) / runs
	t.Logf("LH.SCAN COUNT 10 of %d leases: %d bytes allocated", total, per)
	if per > 1<<20 {
		t.Errorf("LH.SCAN COUNT 10 of %d leases allocated %d bytes, want under 1 MiB", total, per)
	}
	var got []string
	cursor, pages := "0", 0
	for {
		next, names := rtScan(t, c, "s/", cursor, "COUNT", "997")
		got = append(got, names...)
		if pages++; next == "0" || pages > 100 {
			break
		}
		cursor = next
	}
	if strings.Join(got, " ") != strings.Join(want, " ") || pages != total/997+1 {
		t.Errorf("%d names in %d pages, want each of %d once, in order, in %d pages", len(got), pages, total, total/997+1)
	}
}
