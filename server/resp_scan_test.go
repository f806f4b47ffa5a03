package server

import (
	"fmt"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/wire/resp"
)

// rtScan sends LH.SCAN and returns the next cursor and the names of the
// page's records.
func rtScan(t *testing.T, c *rtConn, args ...string) (next string, names []string) {
	t.Helper()
	c.send(string(resp.AppendCommand(nil, append([]string{"LH.SCAN"}, args...)...)))
	v, err := c.rd.ReadValue()
	if err != nil {
		t.Fatal(err)
	}
	if v.Type != resp.Array || len(v.Array) != 2 || v.Array[0].Type != resp.BulkString || v.Array[1].Type != resp.Array {
		t.Fatalf("LH.SCAN %q = %s, want [cursor, [records]]", args, rtShow(v))
	}
	for _, r := range v.Array[1].Array {
		if len(r.Array) != resp.RecordLen {
			t.Fatalf("LH.SCAN record %s", rtShow(r))
		}
		names = append(names, string(r.Array[5].Str))
	}
	return string(v.Array[0].Str), names
}

// TestRESPListCapAndScan: LH.LIST over MaxList answers TOOMANY and changes
// nothing; LH.SCAN pages through every lease the caller may read, each
// once, in name order.
func TestRESPListCapAndScan(t *testing.T) {
	_, addr := rtServe(t, rtEngine(t), RESPOptions{Auth: rtAuth(t), MaxList: 10})
	admin := rtDial(t, addr)
	rtExpect(t, "AUTH", admin.do("AUTH", "admin-token"), "+OK")
	var want []string
	for i := 0; i < 25; i++ {
		name := fmt.Sprintf("team/l%02d", i)
		rtExpect(t, "acquire", admin.do("LH.ACQUIRE", name, "me", "60000"), "[:")
		want = append(want, name)
	}
	for i := 0; i < 5; i++ { // team has read, not write, here
		name := fmt.Sprintf("team/ro/x%d", i)
		rtExpect(t, "acquire", admin.do("LH.ACQUIRE", name, "me", "60000"), "[:")
		want = append(want, name)
	}
	rtExpect(t, "acquire", admin.do("LH.ACQUIRE", "teams", "me", "60000"), "[:") // not under team/
	rtExpect(t, "LIST over the cap", admin.do("LH.LIST", "team/"), `-TOOMANY more than 10 leases under "team/"; use LH.SCAN`)
	rtExpect(t, "LIST under the cap", admin.do("LH.LIST", "team/ro/"), "[[")

	team := rtDial(t, addr)
	rtExpect(t, "AUTH", team.do("AUTH", "team-token"), "+OK")
	var got []string
	cursor, pages := "0", 0
	for {
		next, names := rtScan(t, team, "team/", cursor, "COUNT", "7")
		if len(names) > 7 {
			t.Fatalf("page of %d, want at most 7", len(names))
		}
		got = append(got, names...)
		pages++
		if next == "0" {
			break
		}
		if pages > 10 {
			t.Fatal("LH.SCAN does not end")
		}
		cursor = next
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("scanned %q, want %q", got, want)
	}
	if pages != 5 {
		t.Errorf("%d pages of 7 for 30 leases, want 5", pages)
	}

	// The default page holds them all; a lease released during a scan is
	// simply not seen, the others are each seen once.
	next, names := rtScan(t, team, "team/", "0")
	if next != "0" || len(names) != 30 {
		t.Errorf("default COUNT: next %q, %d records; want 0 and 30", next, len(names))
	}
	next, first := rtScan(t, team, "team/", "0", "COUNT", "10")
	rtExpect(t, "force release", admin.do("LH.FORCERELEASE", "team/l10"), "[")
	rtExpect(t, "force release", admin.do("LH.FORCERELEASE", "team/l05"), "[")
	rest := []string{}
	for next != "0" {
		var names []string
		next, names = rtScan(t, team, "team/", next, "COUNT", "10")
		rest = append(rest, names...)
	}
	if len(first) != 10 || len(rest) != 19 || rest[0] != "team/l11" || first[5] != "team/l05" {
		t.Errorf("scan across a release: %q then %q", first, rest)
	}

	// Bad arguments: a clear error.
	for _, bad := range []struct{ args, want string }{
		{"LH.SCAN|team/", "-ERR wrong number of arguments for 'lh.scan'"},
		{"LH.SCAN|team/|0|COUNT", "-ERR wrong number"},
		{"LH.SCAN|team/|0|COUNT|0", "-INVALID count: "},
		{"LH.SCAN|team/|0|COUNT|10001", "-INVALID count: "},
		{"LH.SCAN|team/|0|COUNT|ten", "-INVALID count: "},
		{"LH.SCAN|team/|0|LIMIT|10", "-ERR syntax error: unknown option 'LIMIT'"},
		{"LH.SCAN|team/|1", "-INVALID cursor: "},
		{"LH.SCAN|team/|n!!", "-INVALID cursor: "},
		{"LH.SCAN|team/|n", "-INVALID cursor: "},
		{"LH.SCAN|other/|0", "-NOPERM"},
		{"LH.SCAN|a/../b|0", "-INVALID name: "},
	} {
		rtExpect(t, bad.args, team.do(strings.Split(bad.args, "|")...), bad.want)
	}
}
