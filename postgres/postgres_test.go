package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/randid"
	"github.com/leasehold/leasehold/postgres"
	"github.com/leasehold/leasehold/stores"
	"github.com/leasehold/leasehold/storetest"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// freshTable returns a table name of its own for this test, dropped (with
// its schema, if qualified) when the test ends.
func freshTable(t testing.TB, base, prefix string) string {
	table := prefix + randid.Hex(6)
	t.Cleanup(func() {
		exec(t, base, "DROP TABLE IF EXISTS "+table+", "+table+"_queue, "+table+"_records")
		exec(t, base, "DROP FUNCTION IF EXISTS "+table+"_wait, "+table+"_release, "+table+"_txn")
	})
	return table
}

// exec runs one statement on base through a short-lived pool.
func exec(t testing.TB, base, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, base)
	if err != nil {
		t.Errorf("connect: %v", err)
		return
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, sql); err != nil {
		t.Errorf("%s: %v", sql, err)
	}
}

func withParam(u, key, value string) string {
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	return u + sep + key + "=" + value
}

func open(t testing.TB, u string, opts ...postgres.Option) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(ctxFor(t, time.Minute), u, opts...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func TestConformance(t *testing.T) {
	base := enginetest.PostgresURL(t)
	u := withParam(base, "table", freshTable(t, base, "lh_test_"))
	window := postgres.WithWaiterWindow(time.Second)
	storetest.Run(t, storetest.Harness{
		Open: func(t testing.TB) leasehold.Store { return open(t, u, window) },
		Reopen: func(t testing.TB, s leasehold.Store) leasehold.Store {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			return open(t, u, window)
		},
		Queued: func(ctx context.Context, s leasehold.Store, name, owner string) (bool, error) {
			return postgres.Queued(ctx, s.(*postgres.Store), name, owner)
		},
		WaiterLiveness: time.Second,
	})
}

// TestOpenRejectsBadInput needs no server: everything here is refused
// before anything is dialled (port 1 would refuse the connection, which is
// not ErrInvalid).
func TestOpenRejectsBadInput(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	for _, u := range []string{
		"", "mysql://127.0.0.1:1/db", "127.0.0.1:1", "postgres://127.0.0.1:1/db?table=Leases",
		"postgres://127.0.0.1:1/db?table=a.b.c", "postgres://127.0.0.1:1/db?table=x;drop%20table%20y",
		"postgres://127.0.0.1:1/db?migrate=maybe", "postgres://127.0.0.1:1/db?table=",
		"postgres://127.0.0.1:1:2/db", "postgres://127.0.0.1:1/db?sslmode=sometimes",
		"postgres://127.0.0.1:1/db?pool_max_conns=zero",
		"postgres://127.0.0.1:1/db?holdback=soon", "postgres://127.0.0.1:1/db?holdback=-1s",
		"postgres://127.0.0.1:1/db?holdback=100000h", "postgres://127.0.0.1:1/db?holdback=1s&holdback=2s",
	} {
		if s, err := postgres.Open(ctx, u); !errors.Is(err, leasehold.ErrInvalid) {
			t.Errorf("Open(%q): %v, want ErrInvalid", u, err)
			if s != nil {
				s.Close()
			}
		}
		if strings.HasPrefix(u, "postgres://") {
			if _, err := stores.Open(ctx, u); !errors.Is(err, leasehold.ErrInvalid) {
				t.Errorf("stores.Open(%q): %v, want ErrInvalid", u, err)
			}
		}
	}
	if _, err := postgres.Open(ctx, "postgres://127.0.0.1:1/db", postgres.WithTable("no-dashes")); !errors.Is(err, leasehold.ErrInvalid) {
		t.Errorf("Open with a bad WithTable: %v, want ErrInvalid", err)
	}
	if _, err := postgres.Open(ctx, "postgres://127.0.0.1:1/db", postgres.WithHoldback(-time.Second)); !errors.Is(err, leasehold.ErrInvalid) {
		t.Errorf("Open with a negative WithHoldback: %v, want ErrInvalid", err)
	}
	if _, err := postgres.New(ctx, nil); !errors.Is(err, leasehold.ErrInvalid) {
		t.Errorf("New(nil pool): %v, want ErrInvalid", err)
	}
	if err := postgres.Init(ctx, "postgres://127.0.0.1:1/db?table=BAD"); !errors.Is(err, leasehold.ErrInvalid) {
		t.Errorf("Init with a bad table: %v, want ErrInvalid", err)
	}
	// A good URL to a closed port is an error, but not an invalid argument.
	if _, err := postgres.Open(ctx, "postgres://127.0.0.1:1/db?connect_timeout=5"); err == nil || errors.Is(err, leasehold.ErrInvalid) {
		t.Errorf("Open of an unreachable server: %v, want a connection error", err)
	}
}

// TestListPrefixExact checks List against Go's strings.HasPrefix and byte
// order, with LIKE's pattern characters, backslashes, and code points at
// the edges of UTF-8 in names and prefixes.
func TestListPrefixExact(t *testing.T) {
	base := enginetest.PostgresURL(t)
	s := open(t, withParam(base, "table", freshTable(t, base, "lh_test_list_")))
	defer s.Close()
	ctx := ctxFor(t, time.Minute)
	names := []string{"%", "%a", "_", "_a", "a", "a%", "a%b", "a_b", "ab", "a\\", "a\\b", "\\", "\\%",
		"é", "é/x", "e\u0301", "e", "\u00ff", "\u0100", "\ud7ff", "\ud7ffx", "\ue000", "\U0010ffff",
		"\U0010ffffa", "\U0010ffff\U0010ffff", "~", " ", "a b", "Z", "z", "日本", "日本語"}
	for _, n := range names {
		if _, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: n, Owner: "o", TTL: time.Minute}); err != nil {
			t.Fatalf("acquire %q: %v", n, err)
		}
	}
	prefixes := []string{"", "%%", "a\\%", "x", "\U0010ffff\U0010ffff\U0010ffff"}
	for _, n := range names {
		for i := range n {
			if i > 0 {
				prefixes = append(prefixes, n[:i])
			}
		}
		prefixes = append(prefixes, n)
	}
	for _, p := range prefixes {
		var want []string
		for _, n := range names {
			if strings.HasPrefix(n, p) {
				want = append(want, n)
			}
		}
		slices.Sort(want)
		recs, err := s.List(ctx, p)
		if err != nil {
			t.Fatalf("List(%q): %v", p, err)
		}
		var got []string
		for _, r := range recs {
			got = append(got, r.Name)
		}
		if !slices.Equal(got, want) {
			t.Errorf("List(%q) = %q, want %q", p, got, want)
		}
	}
}

// TestWatchAcrossStores: a release through one Store wakes a watcher of
// another (another process, as far as the server can tell).
func TestWatchAcrossStores(t *testing.T) {
	base := enginetest.PostgresURL(t)
	u := withParam(base, "table", freshTable(t, base, "lh_test_watch_"))
	a, b := open(t, u), open(t, u)
	defer a.Close()
	defer b.Close()
	ctx := ctxFor(t, time.Minute)
	ch, err := a.Watch(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, func() bool { return postgres.Listens(a) >= 1 })
	drain(ch)
	for i := 0; i < 3; i++ {
		rec, err := b.TryAcquire(ctx, leasehold.AcquireRequest{Name: "w", Owner: "b", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Release(ctx, "w", "b", rec.Token); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("release %d through another Store: no notification within 10s", i)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Watch(ctx, "w"); !errors.Is(err, leasehold.ErrClosed) {
		t.Errorf("Watch after Close: %v, want ErrClosed", err)
	}
	if _, err := a.Get(ctx, "w"); !errors.Is(err, leasehold.ErrClosed) {
		t.Errorf("Get after Close: %v, want ErrClosed", err)
	}
}

func drain(ch <-chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

func waitFor(t testing.TB, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s", d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestAcquireRaceOnNewName: contenders for a name nobody used yet race to
// insert its row. The losers wait for the winner's insert, are refused, and
// must name the winner as holder, although the row is newer than their
// statement's snapshot (which TryAcquire handles by running it again).
func TestAcquireRaceOnNewName(t *testing.T) {
	base := enginetest.PostgresURL(t)
	u := withParam(base, "table", freshTable(t, base, "lh_test_race_"))
	const contenders = 6
	stores := make([]*postgres.Store, contenders)
	for i := range stores {
		stores[i] = open(t, u)
		defer stores[i].Close()
	}
	ctx := ctxFor(t, 2*time.Minute)
	for round := 0; round < 40; round++ {
		name := fmt.Sprintf("race/%d", round)
		start := make(chan struct{})
		type result struct {
			owner string
			rec   leasehold.Record
			err   error
		}
		results := make(chan result, contenders)
		for i, s := range stores {
			owner := fmt.Sprintf("c%d", i)
			go func() {
				<-start
				rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: name, Owner: owner, TTL: time.Minute})
				results <- result{owner, rec, err}
			}()
		}
		close(start)
		var winners []result
		var held []result
		for range stores {
			r := <-results
			var he *leasehold.HeldError
			switch {
			case r.err == nil:
				winners = append(winners, r)
			case errors.As(r.err, &he):
				held = append(held, r)
			default:
				t.Errorf("round %d, %s: %v", round, r.owner, r.err)
			}
		}
		if len(winners) != 1 {
			t.Fatalf("round %d: %d winners", round, len(winners))
		}
		w := winners[0]
		for _, r := range held {
			var he *leasehold.HeldError
			errors.As(r.err, &he)
			if he.Owner != w.owner || he.Token != w.rec.Token || he.Remaining <= 0 {
				t.Errorf("round %d: %s told %+v, but %s holds token %d", round, r.owner, he, w.owner, w.rec.Token)
			}
		}
	}
	var reruns int64
	for _, s := range stores {
		reruns += postgres.AcquireReruns(s)
	}
	t.Logf("statements run again for a holder inserted after their snapshot: %d", reruns)
}

// TestRefusalWritesNothing: refusing an acquire because of a live holder is
// a read. The row keeps xmax 0: no row lock, hence no transaction id, WAL
// record or commit flush. (A refusal by ON CONFLICT alone would lock the
// row.)
func TestRefusalWritesNothing(t *testing.T) {
	base := enginetest.PostgresURL(t)
	table := freshTable(t, base, "lh_test_refuse_")
	s := open(t, withParam(base, "table", table))
	defer s.Close()
	ctx := ctxFor(t, time.Minute)
	a, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "n", Owner: "a", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		_, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "n", Owner: "b", RequestID: "r", TTL: time.Minute})
		var he *leasehold.HeldError
		if !errors.As(err, &he) || he.Owner != "a" || he.Token != a.Token {
			t.Fatalf("refused acquire: %v", err)
		}
	}
	pool, err := pgxpool.New(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var xmax string
	if err := pool.QueryRow(ctx, "SELECT xmax::text FROM "+table+" WHERE name = 'n'").Scan(&xmax); err != nil {
		t.Fatal(err)
	}
	if xmax != "0" {
		t.Errorf("row xmax = %s after refused acquires, want 0 (not locked)", xmax)
	}
}

// TestURLTyposAndReadOnly (issue 31 red team, PostgreSQL item 5): a typo
// of one of leasehold's parameters (holdbak=5s) went to the server as a
// setting and failed there (exit 70); it is an invalid argument naming
// the parameter meant. PostgreSQL's own settings, pgx's parameters and
// custom settings (with a dot) still pass. A read-only server (a
// replica; here a session that defaults to read-only) is refused with a
// hint naming target_session_attrs=read-write.
func TestURLTyposAndReadOnly(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	for u, want := range map[string]string{
		"postgres://127.0.0.1:1/db?holdbak=5s":   "did you mean holdback=?",
		"postgres://127.0.0.1:1/db?hold_back=5s": "did you mean holdback=?",
		"postgres://127.0.0.1:1/db?Holdback=5s":  "did you mean holdback=?",
		"postgres://127.0.0.1:1/db?tabel=x":      "did you mean table=?",
		"postgres://127.0.0.1:1/db?migrat=false": "did you mean migrate=?",
		// Near-misses of pgx's parameters (issue 31 red team): they went
		// to the server as settings and failed after connecting.
		"postgres://127.0.0.1:1/db?sslmod=require":                 "did you mean sslmode=?",
		"postgres://127.0.0.1:1/db?SSLMODE=disable":                "did you mean sslmode=?",
		"postgres://127.0.0.1:1/db?ssl_mode=disable":               "did you mean sslmode=?",
		"postgres://127.0.0.1:1/db?sslrootcrt=/x":                  "did you mean sslrootcert=?",
		"postgres://127.0.0.1:1/db?target_session_attr=read-write": "did you mean target_session_attrs=?",
		"postgres://127.0.0.1:1/db?pool_max_con=4":                 "did you mean pool_max_conns=?",
		"postgres://127.0.0.1:1/db?connect_timout=5":               "did you mean connect_timeout=?",
	} {
		_, err := postgres.Open(ctx, u)
		if !errors.Is(err, leasehold.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%q): %v, want ErrInvalid saying %q", u, err, want)
		}
	}
	base := enginetest.PostgresURL(t)
	u := withParam(base, "table", freshTable(t, base, "lh_test_params_"))
	s := open(t, u+"&application_name=lh_typo_test&statement_timeout=5s&search_path=public&lh.custom=1&timezone=UTC")
	s.Close()
	hinted := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "read-only") || !strings.Contains(err.Error(), "target_session_attrs=read-write") {
			t.Errorf("%s in a read-only session: %v, want the read-only refusal with a hint naming target_session_attrs=read-write", what, err)
		}
	}
	// The table exists: Open writes nothing, the first grant is refused.
	ro := open(t, u+"&default_transaction_read_only=on")
	defer ro.Close()
	_, err := ro.TryAcquire(ctx, leasehold.AcquireRequest{Name: "x", Owner: "o", TTL: time.Second})
	hinted("TryAcquire", err)
	// A table to create: Open is refused.
	_, err = postgres.Open(ctx, withParam(base, "table", freshTable(t, base, "lh_test_ro_"))+"&default_transaction_read_only=on")
	hinted("Open", err)
}
