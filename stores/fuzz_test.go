package stores

import (
	"context"
	"errors"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// schemeRE is RFC 3986's scheme grammar, the rule schemeOf documents.
var schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.\-]*$`)

// secrets returns the password of rawURL's user part and its token=
// parameter, found without net/url (which may refuse the URL), when each
// appears exactly once in rawURL and is long enough to be told apart.
func secrets(rawURL string) []string {
	var out []string
	add := func(s string) {
		if len(s) >= 6 && strings.Count(rawURL, s) == 1 {
			out = append(out, s)
		}
	}
	if _, rest, ok := strings.Cut(rawURL, "://"); ok {
		authority := rest
		if i := strings.IndexAny(rest, "/?#"); i >= 0 {
			authority = rest[:i]
		}
		if i := strings.LastIndexByte(authority, '@'); i >= 0 {
			if _, pw, ok := strings.Cut(authority[:i], ":"); ok {
				add(pw)
			}
		}
	}
	if _, query, ok := strings.Cut(rawURL, "?"); ok {
		query, _, _ = strings.Cut(query, "#")
		for _, kv := range strings.Split(query, "&") {
			if v, ok := strings.CutPrefix(kv, "token="); ok {
				add(v)
			}
		}
	}
	return out
}

// FuzzStoreURL fuzzes the parsing of store URLs: schemeOf against RFC
// 3986's grammar, and Open for every URL it can open without touching the
// disk or the network — a malformed or unknown scheme (an *InvalidError
// naming the store URL), memory://, and http(s):// (the server's HTTP
// API, whose store does not connect until used; URLs naming certificate
// files are left out; a memory: URL with a query is refused). Other
// schemes (sqlite://, which creates files, and the networked engines,
// which dial) are only checked to be registered.
// An error never repeats the URL's password or token.
func FuzzStoreURL(f *testing.F) {
	for _, s := range []string{
		"memory://", "memory:", "MEMORY://x?y#z", "memory://?#x", "memory://#a?b", "sqlite:///var/lib/leasehold/leases.db", "sqlite://leases.db", "sqlite:rel.db",
		"postgres://u:pw@localhost:5432/db?sslmode=disable&table=leases", "postgresql://h1,h2/db", "redis://:secret@localhost:6379/0",
		"rediss://localhost?prefix=lh:", "etcd://a:2379,b:2379/?prefix=x/", "etcds://u:pass@h", "dynamodb://table?region=eu-west-1",
		"http://127.0.0.1:7070", "https://h/?token=abcdef123&timeout=10s", "https://h/?ca=/nonexistent", "http://h/?bogus=1",
		"http://u:hunter22@h/", "http://h/%zz?token=secret-token", "https://u:pass-word@h/%zz", "leasehold://h:6380",
		"", ":", "://", "1http://h", "ht tp://h", "h*ttp://x", "x+y.z-w:rest", "unknown://h", "file:///etc/passwd",
		"http://[::1", "http://h:99999", "http://h/?timeout=-1s", "HTTP://H/", "http://h\x00/",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		scheme, err := schemeOf(raw)
		before, _, found := strings.Cut(raw, ":")
		wantOK := found && schemeRE.MatchString(before)
		switch {
		case wantOK && err != nil:
			t.Fatalf("schemeOf(%q) refused a valid scheme: %v", raw, err)
		case wantOK && scheme != strings.ToLower(before):
			t.Fatalf("schemeOf(%q) = %q, want %q", raw, scheme, strings.ToLower(before))
		case !wantOK && err == nil:
			t.Fatalf("schemeOf(%q) = %q, but the scheme is malformed", raw, scheme)
		case !wantOK:
			checkURLInvalid(t, raw, err)
		}

		_, registered := openers[scheme]
		switch {
		case raw == "":
			return // Open would use $LEASEHOLD_STORE or the default file
		case err != nil, !registered, scheme == "memory":
		case scheme == "http" || scheme == "https":
			if u, perr := url.Parse(raw); perr == nil {
				if q, qerr := url.ParseQuery(u.RawQuery); qerr == nil && (q.Has("ca") || q.Has("cert") || q.Has("key")) {
					return // would read those files
				}
			}
		default:
			if !slices.Contains(Schemes(), scheme) {
				t.Fatalf("scheme %q has an opener but is not in Schemes()", scheme)
			}
			return // would create files or dial
		}

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, oerr := Open(ctx, raw)
		if s != nil {
			defer s.Close()
		}
		switch {
		case (s == nil) == (oerr == nil):
			t.Fatalf("Open(%q) = %v, %v: want a store or an error", raw, s, oerr)
		case err != nil && !errors.Is(oerr, err) && oerr.Error() != err.Error():
			t.Fatalf("Open(%q) = %v, want schemeOf's error %v", raw, oerr, err)
		case err == nil && !registered:
			checkURLInvalid(t, raw, oerr)
			if !strings.Contains(oerr.Error(), "sqlite") {
				t.Fatalf("Open(%q): %v does not list the known schemes", raw, oerr)
			}
		case scheme == "memory" && memoryQuery(raw):
			checkURLInvalid(t, raw, oerr)
		case scheme == "memory":
			if oerr != nil {
				t.Fatalf("Open(%q): %v", raw, oerr)
			}
			if _, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "n", Owner: "o", TTL: time.Second}); err != nil {
				t.Fatalf("the store of %q does not work: %v", raw, err)
			}
		case oerr != nil && oerr.Error() == "":
			t.Fatalf("Open(%q): an empty error", raw)
		}
		if oerr == nil {
			return
		}
		checkURLInvalid(t, raw, oerr)
		for _, secret := range secrets(raw) {
			if strings.Contains(oerr.Error(), secret) {
				t.Fatalf("Open(%q): the error %q repeats a secret of the URL", raw, oerr)
			}
		}
	})
}

// memoryQuery reports whether a memory: URL has a query, which it may not.
func memoryQuery(raw string) bool {
	beforeFragment, _, _ := strings.Cut(raw, "#")
	_, q, _ := strings.Cut(beforeFragment, "?")
	return q != ""
}

func checkURLInvalid(t *testing.T, raw string, err error) {
	t.Helper()
	var inv *leasehold.InvalidError
	if !errors.As(err, &inv) || !errors.Is(err, leasehold.ErrInvalid) || inv.Field != "store URL" || inv.Reason == "" {
		t.Fatalf("%q refused with %T %v, want an *InvalidError for the store URL", raw, err, err)
	}
}
