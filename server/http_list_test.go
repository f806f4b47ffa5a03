package server

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// htFill acquires n leases named prefix0000, prefix0001, ... straight on
// the engine.
func htFill(t *testing.T, ts *htServer, prefix string, n int) []string {
	t.Helper()
	var names []string
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("%s%05d", prefix, i)
		_, err := ts.eng.Acquire(context.Background(), AcquireRequest{AcquireRequest: leasehold.AcquireRequest{Name: name, Owner: "o", TTL: time.Hour}})
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	return names
}

// htPages lists by pages of limit (0: the default) and returns the names
// and the number of pages.
func htPages(t *testing.T, ts *htServer, token, query string, limit int) ([]string, int) {
	t.Helper()
	var names []string
	after, pages := "", 0
	for {
		q := "/v1/leases?" + query
		if limit > 0 {
			q += fmt.Sprintf("&limit=%d", limit)
		}
		if after != "" {
			q += "&after=" + after
		}
		r := ts.do("GET", q, token, "")
		ts.want(r, 200, "")
		pages++
		ls, _ := r.json["leases"].([]any)
		for _, l := range ls {
			names = append(names, l.(map[string]any)["name"].(string))
		}
		next, has := r.json["next"]
		if !has {
			return names, pages
		}
		if next != names[len(names)-1] {
			t.Fatalf("next %v is not the page's last name %s", next, names[len(names)-1])
		}
		after = next.(string)
		if pages > 100 {
			t.Fatal("no end")
		}
	}
}

func TestHTTPListPages(t *testing.T) {
	ts := newHTServer(t, HandlerOptions{})
	want := htFill(t, ts, "p/", 25)
	htFill(t, ts, "q/", 3)
	got, pages := htPages(t, ts, "", "prefix=p/", 10)
	if fmt.Sprint(got) != fmt.Sprint(want) || pages != 3 {
		t.Errorf("%d pages: %v", pages, got)
	}
	// A page that ends exactly at the last lease has no next.
	got, pages = htPages(t, ts, "", "prefix=p/", 25)
	if len(got) != 25 || pages != 1 {
		t.Errorf("limit 25: %d names in %d pages", len(got), pages)
	}
	// after need not be a live name.
	r := ts.do("GET", "/v1/leases?prefix=p/&after=p/00010x&limit=2", "", "")
	ts.want(r, 200, "")
	if ls := r.json["leases"].([]any); len(ls) != 2 || ls[0].(map[string]any)["name"] != "p/00011" || r.str("next") != "p/00012" {
		t.Errorf("after p/00010x: %s", r.body)
	}
	for _, bad := range []string{"limit=0", "limit=-1", "limit=10001", "limit=x", "limit=", "limit=1.5"} {
		r := ts.do("GET", "/v1/leases?"+bad, "", "")
		if r.status != 400 || r.str("field") != "limit" {
			t.Errorf("%s: %d %s", bad, r.status, r.body)
		}
	}
	// after is only compared (it may be a name stored before today's
	// rules): any text is accepted.
	ts.want(ts.do("GET", "/v1/leases?after=a%00", "", ""), 200, "")
}

// TestHTTPListDefaultLimit: without limit a page has at most 10,000
// leases, and the rest follow with next.
func TestHTTPListDefaultLimit(t *testing.T) {
	ts := newHTServer(t, HandlerOptions{})
	want := htFill(t, ts, "big/", HTTPMaxListLimit+5)
	r := ts.do("GET", "/v1/leases", "", "")
	ts.want(r, 200, "")
	if n := len(r.json["leases"].([]any)); n != HTTPMaxListLimit || r.str("next") != want[HTTPMaxListLimit-1] {
		t.Fatalf("first page: %d leases, next %q", n, r.str("next"))
	}
	got, pages := htPages(t, ts, "", "", 0)
	if len(got) != len(want) || pages != 2 || !sort.StringsAreSorted(got) {
		t.Errorf("%d names in %d pages", len(got), pages)
	}
}

// TestHTTPListPagesAuth: names the caller may not read neither appear nor
// count toward a page.
func TestHTTPListPagesAuth(t *testing.T) {
	ts := newHTServer(t, HandlerOptions{Auth: htAuth(t)})
	htFill(t, ts, "team/a", 5)
	htFill(t, ts, "other/", 5)
	htFill(t, ts, "team/z", 5)
	got, pages := htPages(t, ts, htTeam, "prefix=team/", 4)
	if len(got) != 10 || pages != 3 {
		t.Errorf("team: %v in %d pages", got, pages)
	}
	got, _ = htPages(t, ts, htAdmin, "", 4)
	if len(got) != 15 {
		t.Errorf("admin: %v", got)
	}
}
