package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/randid"
	"github.com/leasehold/leasehold/postgres"
	"github.com/leasehold/leasehold/stores"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

func TestMigrate(t *testing.T) {
	base := enginetest.PostgresURL(t)
	ctx := ctxFor(t, 2*time.Minute)

	// Concurrent openers of a new table all succeed.
	table := freshTable(t, base, "lh_test_mig_")
	u := withParam(base, "table", table)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := postgres.Open(ctx, u)
			if err == nil {
				err = s.Close()
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent Open of a new table: %v", err)
		}
	}
	s := open(t, u, postgres.WithoutMigrate(), postgres.WithTable("not_this_one")) // the URL's table= wins
	if s.Table() != "public."+table {
		t.Errorf("Table() = %q, want public.%s", s.Table(), table)
	}
	s.Close()

	// Without migration a missing table is an error, not created.
	missing := freshTable(t, base, "lh_test_missing_")
	if _, err := postgres.Open(ctx, withParam(withParam(base, "table", missing), "migrate", "false")); err == nil ||
		!strings.Contains(err.Error(), "does not exist") {
		t.Errorf("Open without migration of a missing table: %v", err)
	}
	// Init creates it even when the URL says migrate=false.
	if err := postgres.Init(ctx, withParam(withParam(base, "migrate", "false"), "table", missing)); err != nil {
		t.Fatalf("Init: %v", err)
	}
	open(t, withParam(base, "table", missing), postgres.WithoutMigrate()).Close()
	// So does stores.Init, through the registered initializer.
	viaStores := freshTable(t, base, "lh_test_init_")
	if err := stores.Init(ctx, strings.Replace(withParam(base, "table", viaStores), "postgres://", "postgresql://", 1)); err != nil {
		t.Fatalf("stores.Init: %v", err)
	}
	st, err := stores.Open(ctx, withParam(withParam(base, "table", viaStores), "migrate", "false"))
	if err != nil {
		t.Fatalf("stores.Open: %v", err)
	}
	if _, ok := st.(*postgres.Store); !ok {
		t.Errorf("stores.Open opened %T", st)
	}
	st.Close()

	// A table that is not ours, or from a newer schema, is refused.
	foreign := freshTable(t, base, "lh_test_foreign_")
	exec(t, base, "CREATE TABLE "+foreign+" (id int)")
	if _, err := postgres.Open(ctx, withParam(base, "table", foreign)); err == nil || !strings.Contains(err.Error(), "not a leasehold") {
		t.Errorf("Open of a foreign table: %v", err)
	}
	newer := freshTable(t, base, "lh_test_newer_")
	open(t, withParam(base, "table", newer)).Close()
	exec(t, base, "COMMENT ON TABLE "+newer+" IS 'leasehold lease table; schema version 99'")
	if _, err := postgres.Open(ctx, withParam(base, "table", newer)); err == nil || !strings.Contains(err.Error(), "version 99") {
		t.Errorf("Open of a newer schema: %v", err)
	}

	// Schema-qualified names; Migrate on a pool of the caller's.
	schema := "lh_test_schema_" + randid.Hex(6)
	exec(t, base, "CREATE SCHEMA "+schema)
	t.Cleanup(func() { exec(t, base, "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	pool, err := pgxpool.New(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := postgres.Migrate(ctx, pool, schema+".leases"); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	q, err := postgres.New(ctx, pool, postgres.WithTable(schema+".leases"), postgres.WithoutMigrate())
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if q.Table() != schema+".leases" {
		t.Errorf("Table() = %q", q.Table())
	}
	if _, err := q.TryAcquire(ctx, leasehold.AcquireRequest{Name: "n", Owner: "o", TTL: time.Minute}); err != nil {
		t.Errorf("TryAcquire on a schema-qualified table: %v", err)
	}
	q.Close()
	if err := pool.Ping(ctx); err != nil {
		t.Errorf("Close of a Store made with New closed the caller's pool: %v", err)
	}
}

// TestSynchronousCommit: the Store's sessions commit synchronously even
// where the session default is synchronous_commit=off (here set with the
// options startup parameter, as a database or role default would be),
// unless the URL sets it itself.
func TestSynchronousCommit(t *testing.T) {
	base := enginetest.PostgresURL(t)
	ctx := ctxFor(t, time.Minute)
	u := withParam(withParam(base, "table", freshTable(t, base, "lh_test_sync_")), "options", "-c%20synchronous_commit%3Doff")
	for _, tc := range []struct{ url, want string }{
		{u, "on"},
		{withParam(u, "synchronous_commit", "local"), "local"},
	} {
		s := open(t, tc.url)
		got, err := postgres.Setting(ctx, s, "synchronous_commit")
		s.Close()
		if err != nil || got != tc.want {
			t.Errorf("synchronous_commit = %q, %v; want %q", got, err, tc.want)
		}
	}
}

// upgradeInPlace checks that Open of u (a table of an earlier schema,
// described by what) without migration is refused with advice that names
// refusal and store init, then opens it with migration four times at once,
// which upgrades it in place. It returns the four stores (closed when the
// test ends).
func upgradeInPlace(t *testing.T, ctx context.Context, u, what, refusal string) []*postgres.Store {
	t.Helper()
	if _, err := postgres.Open(ctx, withParam(u, "migrate", "false")); err == nil ||
		!strings.Contains(err.Error(), refusal) || !strings.Contains(err.Error(), "store init") {
		t.Fatalf("Open of %s without migration: %v, want advice to upgrade it", what, err)
	}
	var wg sync.WaitGroup
	stores := make([]*postgres.Store, 4)
	errs := make([]error, 4)
	for i := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stores[i], errs[i] = postgres.Open(ctx, u)
		}()
	}
	wg.Wait()
	for _, s := range stores {
		if s != nil {
			t.Cleanup(func() { s.Close() })
		}
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent Open %d of %s: %v", i, what, err)
		}
	}
	return stores
}

// TestMigrateFromVersion1: a database made by the previous schema version
// (the lease table alone, commented version 1, with a held lease) is
// refused without migration, with advice, and upgraded in place by Open
// (several openers at once): the lease and its token survive, and the
// queue works on it.
func TestMigrateFromVersion1(t *testing.T) {
	base := enginetest.PostgresURL(t)
	ctx := ctxFor(t, 2*time.Minute)
	table := freshTable(t, base, "lh_test_v1_")
	exec(t, base, fmt.Sprintf(postgres.LeaseTableV1DDL, table))
	exec(t, base, "COMMENT ON TABLE "+table+" IS 'leasehold lease table; schema version 1'")
	exec(t, base, "INSERT INTO "+table+" VALUES ('n', 'old', '', 7, '', 60000000, now() + interval '1 minute', true, now())")
	u := withParam(base, "table", table)

	stores := upgradeInPlace(t, ctx, u, "a version 1 table", "schema version 1")
	// Now version 2 even without migration.
	open(t, withParam(u, "migrate", "false")).Close()

	a, b := stores[0], stores[1]
	if _, err := a.TryAcquire(ctx, leasehold.AcquireRequest{Name: "n", Owner: "new", TTL: time.Minute}); !errors.Is(err, leasehold.ErrHeld) {
		t.Fatalf("TryAcquire of the lease held before the upgrade: %v, want held", err)
	}
	got := make(chan leasehold.Record, 1)
	go func() {
		rec, err := b.AcquireWait(ctx, leasehold.AcquireRequest{Name: "n", Owner: "new", TTL: time.Minute})
		if err != nil {
			t.Error(err)
		}
		got <- rec
	}()
	waitQueued(t, b, "n", "new")
	if err := a.Release(ctx, "n", "old", 7); err != nil {
		t.Fatalf("Release of the lease held before the upgrade: %v", err)
	}
	if rec := <-got; rec.Token != 8 {
		t.Errorf("the waiter got token %d, want 8", rec.Token)
	}
	if _, err := a.Txn(ctx, leasehold.Txn{Then: []leasehold.Write{{Key: "k", Value: []byte("v")}}}); err != nil {
		t.Errorf("Txn after the upgrade: %v", err)
	}
}

// TestMigrateFromEarlyVersion2: a version 2 table made before the lease
// table had its queued column (never released: the lease table of version
// 1, commented version 2, beside its queue table, with a held lease and a
// live waiter queued for it) is refused without migration, with advice,
// and upgraded in place by Open (several openers at once): the column is
// added and set on the names that have queue rows, so that the holder's
// release hands the lease to the waiter (token + 1) instead of freeing it.
func TestMigrateFromEarlyVersion2(t *testing.T) {
	base := enginetest.PostgresURL(t)
	ctx := ctxFor(t, 2*time.Minute)
	table := freshTable(t, base, "lh_test_v2e_")
	queue := table + "_queue" // derived from the table's name, dropped with it
	exec(t, base, fmt.Sprintf(postgres.LeaseTableV1DDL, table))
	exec(t, base, "COMMENT ON TABLE "+table+" IS 'leasehold lease table; schema version 2'")
	exec(t, base, "INSERT INTO "+table+" VALUES ('n', 'old', '', 7, '', 60000000, now() + interval '1 minute', true, now())")
	exec(t, base, "INSERT INTO "+table+" VALUES ('free', 'old', '', 3, '', 60000000, now() - interval '1 minute', false, now())")
	exec(t, base, fmt.Sprintf(postgres.QueueTableDDL, queue))
	exec(t, base, "INSERT INTO "+queue+" (name, waiter, watch, owner, request_id, ttl_us, data, alive_until)"+
		" VALUES ('n', 'x', false, 'next', 'rid-x', 60000000, '', now() + interval '1 minute')")
	u := withParam(base, "table", table)

	upgradeInPlace(t, ctx, u, "an early version 2 table", "no queued column")
	s := open(t, withParam(u, "migrate", "false"))
	defer s.Close()
	if postgres.QueueTable(s) != `"public"."`+queue+`"` {
		t.Fatalf("queue table %s, want %q", postgres.QueueTable(s), queue)
	}
	if err := s.Release(ctx, "n", "old", 7); err != nil {
		t.Fatalf("Release of the lease held before the upgrade: %v", err)
	}
	if got, err := s.Get(ctx, "n"); err != nil || got.Owner != "next" || got.Token != 8 {
		t.Errorf("after the release: %+v, %v; want it handed to the queued waiter with token 8", got, err)
	}
	if got := queueRows(t, base, s, "n"); got != 0 {
		t.Errorf("queue rows after the hand-over = %d, want 0", got)
	}
	if rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "free", Owner: "a", TTL: time.Minute}); err != nil || rec.Token != 4 {
		t.Errorf("TryAcquire of a free lease after the upgrade: %+v, %v; want token 4", rec, err)
	}
}
