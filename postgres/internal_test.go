package postgres

import (
	"errors"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/leasehold/leasehold"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct{ in, conn, table string }{
		{"postgres://h/db", "postgres://h/db", DefaultTable},
		{"postgresql://u:p@h:5432/db?sslmode=disable", "postgresql://u:p@h:5432/db?sslmode=disable", DefaultTable},
		{"postgres://h/db?table=locks&sslmode=disable", "postgres://h/db?sslmode=disable", "locks"},
		{"postgres://h/db?table=app.locks&migrate=false", "postgres://h/db", "app.locks"},
		{"postgres://h1:5432,h2:5433/db?migrate=true", "postgres://h1:5432,h2:5433/db", DefaultTable},
		{"postgres://h/db?options=-c%20x%3Dy&ta%62le=t&application_name=a+b", "postgres://h/db?options=-c%20x%3Dy&application_name=a+b", "t"},
	} {
		conn, opts, err := parseURL(tc.in)
		if err != nil {
			t.Errorf("parseURL(%q): %v", tc.in, err)
			continue
		}
		cfg, err := buildConfig(opts)
		if conn != tc.conn || err != nil || cfg.table != tc.table {
			t.Errorf("parseURL(%q) = %q, table %q, %v; want %q, table %q", tc.in, conn, cfg.table, err, tc.conn, tc.table)
		}
		if want := !strings.Contains(tc.in, "migrate=false"); cfg.migrate != want {
			t.Errorf("parseURL(%q): migrate %v, want %v", tc.in, cfg.migrate, want)
		}
	}
	for _, bad := range []string{
		"", "mysql://h/db", "postgres:/h/db", "host=h dbname=db", "postgres://h/db?table=",
		"postgres://h/db?table=Locks", "postgres://h/db?table=a.b.c", "postgres://h/db?table=a;drop",
		"postgres://h/db?table=" + strings.Repeat("x", 64), "postgres://h/db?table=a&table=b",
		"postgres://h/db?migrate=no", "postgres://h/db?migrate=false&migrate=true", "postgres://h/db?x=%zz",
		"postgres://h/db?sslmode=disable#frag",
	} {
		if _, _, err := parseURL(bad); !errors.Is(err, leasehold.ErrInvalid) {
			t.Errorf("parseURL(%q): %v, want ErrInvalid", bad, err)
		}
	}
}

func TestParseTable(t *testing.T) {
	for _, ok := range []string{"t", "_t", "leasehold_leases", "s.t", strings.Repeat("a", 63)} {
		if _, err := parseTable(ok); err != nil {
			t.Errorf("parseTable(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "s.", ".t", "1t", "T", "t-1", "t t", `t"`, "a.b.c", "é", strings.Repeat("a", 64)} {
		if _, err := parseTable(bad); !errors.Is(err, leasehold.ErrInvalid) {
			t.Errorf("parseTable(%q): %v, want ErrInvalid", bad, err)
		}
	}
	long := tableName{schema: strings.Repeat("s", 63), name: strings.Repeat("t", 63)}
	if c := long.channel(); len(c) > 63 || !strings.HasPrefix(c, "leasehold:") {
		t.Errorf("channel of a long name = %q (%d bytes)", c, len(c))
	}
	if c := (tableName{"public", "leases"}).channel(); c != "leasehold:public.leases" {
		t.Errorf("channel = %q", c)
	}
}

func TestPrefixEnd(t *testing.T) {
	for _, tc := range []struct {
		in, end string
		ok      bool
	}{
		{"", "", false},
		{"a", "b", true},
		{"a/", "a0", true},
		{"%", "&", true},
		{"\u00ff", "\u0100", true},
		{"x\ud7ff", "x\ue000", true},
		{"x\U0010ffff", "y", true},
		{"\U0010ffff\U0010ffff", "", false},
		{"é\U0010ffff", "ê", true},
	} {
		end, ok := prefixEnd(tc.in)
		if end != tc.end || ok != tc.ok {
			t.Errorf("prefixEnd(%q) = %q, %v; want %q, %v", tc.in, end, ok, tc.end, tc.ok)
		}
	}
	// Property: for sorted valid strings, HasPrefix(s, p) <=> p <= s < end.
	words := []string{"", "a", "a\U0010ffff", "a\U0010ffffz", "b", "é", "ê", "\ud7ff", "\ue000", "\U0010ffff", "%", "&", "a%", "a_", "a\\"}
	for _, p := range words {
		end, ok := prefixEnd(p)
		if ok && !utf8.ValidString(end) {
			t.Errorf("prefixEnd(%q) = %q is not valid UTF-8", p, end)
		}
		for _, s := range words {
			in := s >= p && (!ok || s < end)
			if in != strings.HasPrefix(s, p) {
				t.Errorf("prefix %q, end %q (%v): %q in range = %v", p, end, ok, s, in)
			}
		}
	}
	if !sort.StringsAreSorted([]string{"\ud7ff", "\ue000", "\U0010ffff"}) {
		t.Error("Go does not sort by code point?")
	}
}

func TestMicros(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{{10 * time.Millisecond, 10000}, {time.Microsecond + 1, 2}, {24 * time.Hour, 86400e6}} {
		if got := micros(tc.d); got != tc.want {
			t.Errorf("micros(%s) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

// TestGrantedNote: a notification of a grant made before the waiter's
// latest call is stale (that call found the grant expired and queued the
// waiter again) and is ignored; a later one is the waiter's grant, with
// Remaining counted from the latest call's sending.
func TestGrantedNote(t *testing.T) {
	req := leasehold.AcquireRequest{Name: "n", Owner: "o", TTL: time.Minute}
	last := time.UnixMicro(1_000_000_000_000_000)
	sent := time.Now().Add(-time.Second)
	if _, ok := granted("w1 7 999999999999999", req, sent, last); ok {
		t.Error("a grant made before the latest call was taken")
	}
	rec, ok := granted("w1 7 1000000000000000", req, sent, last)
	if !ok || rec.Token != 7 || rec.Remaining > 59*time.Second || rec.Remaining < 50*time.Second {
		t.Errorf("a grant made at the latest call: %+v, %v", rec, ok)
	}
	for _, bad := range []string{"", "w1", "w1 0 1000000000000000", "w1 x 1", "w1 7 1 2"} {
		if _, ok := granted(bad, req, sent, last); ok {
			t.Errorf("%q taken as a grant", bad)
		}
	}
}
