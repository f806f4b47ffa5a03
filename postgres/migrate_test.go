package postgres_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/enginetest"
	"github.com/leasehold/leasehold/internal/randid"
	"github.com/leasehold/leasehold/postgres"
	"github.com/leasehold/leasehold/stores"
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
