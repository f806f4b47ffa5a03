package server

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// oldName is a name today's rules refuse to create (an invisible
// character) but a store may hold: made before the upgrade, or by the Go
// library on the store directly.
const oldName = "team/b\u200b"

func acquireDirect(t *testing.T, b Backend, name string) leasehold.Record {
	t.Helper()
	rec, err := b.Acquire(context.Background(), AcquireRequest{AcquireRequest: leasehold.AcquireRequest{Name: name, Owner: "o", TTL: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestHTTPExistingNames: such a name can be paged past, read, released by
// its holder and force-released by an admin; creating one is refused.
func TestHTTPExistingNames(t *testing.T) {
	ts := newHTServer(t, HandlerOptions{Auth: rtAuth(t)})
	for _, n := range []string{"team/a", "team/c"} {
		acquireDirect(t, ts.eng, n)
	}
	rec := acquireDirect(t, ts.eng, oldName)
	path := "/v1/leases/" + url.PathEscape(oldName)

	var names []string
	after := ""
	for i := 0; i < 5; i++ {
		r := ts.do("GET", "/v1/leases?prefix=team/&limit=1&after="+url.QueryEscape(after), "team-token", "")
		ts.want(r, 200, "")
		for _, l := range r.json["leases"].([]any) {
			names = append(names, l.(map[string]any)["name"].(string))
		}
		if after = r.str("next"); after == "" {
			break
		}
	}
	if got := strings.Join(names, ","); got != "team/a,"+oldName+",team/c" {
		t.Fatalf("paged names %q", got)
	}
	if g := ts.do("GET", path, "team-token", ""); g.status != 200 || g.str("name") != oldName {
		t.Fatalf("GET: %d %s", g.status, g.body)
	}
	ts.want(ts.do("GET", "/v1/events/recent?name="+url.QueryEscape(oldName), "team-token", ""), 200, "")
	ts.want(ts.do("POST", path+"/renew", "team-token", fmt.Sprintf(`{"owner":"o","token":%d,"ttl_ms":5000}`, rec.Token)), 200, "")
	ts.want(ts.do("POST", path+"/release", "team-token", fmt.Sprintf(`{"owner":"o","token":%d}`, rec.Token)), 204, "")
	acquireDirect(t, ts.eng, oldName)
	ts.want(ts.do("POST", path+"/force-release", "admin-token", ""), 200, "")
	ts.want(ts.do("GET", path, "team-token", ""), 404, "not-found")

	// Created over the API: refused, as before.
	ts.want(ts.do("POST", path+"/acquire", "team-token", `{"owner":"o","ttl_ms":60000}`), 400, "invalid")
	ts.want(ts.do("POST", "/v1/semaphores/"+url.PathEscape(oldName)+"/acquire", "team-token", `{"owner":"o","permits":1,"ttl_ms":60000}`), 400, "invalid")
	ts.want(ts.do("GET", path, "team-token", ""), 404, "not-found")
}

// TestRESPExistingNames is TestHTTPExistingNames over RESP.
func TestRESPExistingNames(t *testing.T) {
	b := rtEngine(t)
	_, addr := rtServe(t, b, RESPOptions{Auth: rtAuth(t)})
	for _, n := range []string{"team/a", "team/c"} {
		acquireDirect(t, b, n)
	}
	rec := acquireDirect(t, b, oldName)
	c, admin := rtDial(t, addr), rtDial(t, addr)
	rtExpect(t, "AUTH", c.do("AUTH", "team-token"), "+OK")
	rtExpect(t, "admin AUTH", admin.do("AUTH", "admin-token"), "+OK")

	if got := c.do("LH.SCAN", "team/", "0", "COUNT", "2"); !strings.Contains(got, "$"+oldName) {
		t.Errorf("SCAN = %q, want %q", got, oldName)
	}
	rtExpect(t, "SCAN past it", c.do("LH.SCAN", "team/", scanCursor(oldName)), "[$0 [[")
	if got := c.do("LH.LIST", "team/"); !strings.Contains(got, "$"+oldName) {
		t.Errorf("LIST = %q", got)
	}
	rtExpect(t, "GET", c.do("LH.GET", oldName), fmt.Sprintf("[:%d", rec.Token))
	tok := fmt.Sprint(rec.Token)
	rtExpect(t, "RENEW", c.do("LH.RENEW", oldName, "o", tok, "5000"), "+OK")
	rtExpect(t, "RELEASE", c.do("LH.RELEASE", oldName, "o", tok), "+OK")
	acquireDirect(t, b, oldName)
	rtExpect(t, "FORCERELEASE", admin.do("LH.FORCERELEASE", oldName), "[:")
	rtExpect(t, "GET after", c.do("LH.GET", oldName), "$nil")

	rtExpect(t, "ACQUIRE of a new such name", c.do("LH.ACQUIRE", oldName, "o", "60000"), "-INVALID name: contains")
	rtExpect(t, "GET after refused ACQUIRE", c.do("LH.GET", oldName), "$nil")
}

// TestExistingFlagParity: an operation both APIs have checks its names
// with the same rule on both (the existing flag of its rows), and every
// operation that may create a name uses the strict one.
func TestExistingFlagParity(t *testing.T) {
	h := map[string]bool{}
	for _, r := range httpRoutes {
		if r.scope != httpPublic {
			h[r.op] = r.existing
		}
	}
	for _, r := range respCommands {
		if he, ok := h[r.op]; ok && r.scope != scopeNone && he != r.existing {
			t.Errorf("operation %s: existing %v over HTTP, %v over RESP", r.op, he, r.existing)
		}
	}
	for _, op := range []string{"lease.acquire", "semaphore.acquire", "record.put", "record.add", "record.txn", "workflow.create", "workflow.transition"} {
		if h[op] {
			t.Errorf("operation %s may create a name but checks the store's rule only", op)
		}
	}
}
