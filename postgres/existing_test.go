package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/postgres"
	"github.com/leasehold/leasehold/stores"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// objects lists the relations and functions whose names start with
// prefix, and the comment of the relation named prefix.
func objects(t *testing.T, base, prefix string) (names []string, comment string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	rows, err := pool.Query(ctx, `SELECT relname FROM pg_class WHERE starts_with(relname, $1)
		UNION ALL SELECT proname || '()' FROM pg_proc WHERE starts_with(proname, $1) ORDER BY 1`, prefix)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	err = pool.QueryRow(ctx, `SELECT coalesce(obj_description(to_regclass($1), 'pg_class'), '')`, prefix).Scan(&comment)
	if err != nil {
		t.Fatal(err)
	}
	return names, comment
}

// TestOpenExistingCreatesNothing (red team of issue 29, item 1): the
// opener of status, release and force-release creates and migrates
// nothing, whatever the URL's migrate= says. A missing table is a
// *NoTableError (and, through stores.OpenExisting, a *stores.NoStoreError
// naming it) with nothing created; a version 1 table is refused and left
// as it was (no queue table, no functions, its comment unchanged); a
// current table whose records table and functions are gone opens, lists
// and releases, and they stay gone.
func TestOpenExistingCreatesNothing(t *testing.T) {
	base := enginetest.PostgresURL(t)
	ctx := ctxFor(t, 2*time.Minute)

	missing := freshTable(t, base, "lh_test_ex_missing_")
	for _, u := range []string{withParam(base, "table", missing), withParam(withParam(base, "table", missing), "migrate", "true")} {
		s, err := postgres.OpenExisting(ctx, u)
		var nt *postgres.NoTableError
		if err == nil {
			s.Close()
		}
		if !errors.As(err, &nt) || !errors.Is(err, postgres.ErrNoTable) || nt.Table != missing || !strings.Contains(err.Error(), "nothing was created") {
			t.Errorf("OpenExisting(table=%s) = %v, want a *NoTableError naming it", missing, err)
		}
		st, err := stores.OpenExisting(ctx, u)
		var nse *stores.NoStoreError
		if err == nil {
			st.Close()
		}
		if !errors.As(err, &nse) || nse.Table != missing || !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("stores.OpenExisting(table=%s) = %v, want a *stores.NoStoreError naming it", missing, err)
		}
	}
	if got, _ := objects(t, base, missing); len(got) != 0 {
		t.Errorf("OpenExisting of a missing table created %v", got)
	}

	v1 := freshTable(t, base, "lh_test_ex_v1_")
	exec(t, base, fmt.Sprintf(postgres.LeaseTableV1DDL, v1))
	exec(t, base, "COMMENT ON TABLE "+v1+" IS 'leasehold lease table; schema version 1'")
	exec(t, base, "INSERT INTO "+v1+" VALUES ('n', 'old', '', 7, '', 60000000, now() + interval '1 minute', true, now())")
	before, _ := objects(t, base, v1)
	for _, u := range []string{withParam(base, "table", v1), withParam(withParam(base, "table", v1), "migrate", "true")} {
		s, err := postgres.OpenExisting(ctx, u)
		if err == nil {
			s.Close()
		}
		if err == nil || !strings.Contains(err.Error(), "schema version 1") || !strings.Contains(err.Error(), "never migrates") {
			t.Errorf("OpenExisting of a version 1 table: %v, want it refused, saying it is not migrated", err)
		}
	}
	if after, comment := objects(t, base, v1); fmt.Sprint(after) != fmt.Sprint(before) || comment != "leasehold lease table; schema version 1" {
		t.Errorf("OpenExisting of a version 1 table changed it: objects %v (before %v), comment %q", after, before, comment)
	}

	cur := freshTable(t, base, "lh_test_ex_cur_")
	s := open(t, withParam(base, "table", cur))
	if _, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "n", Owner: "o", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	exec(t, base, "DROP TABLE "+cur+"_records")
	exec(t, base, "DROP FUNCTION "+cur+"_txn")
	before, _ = objects(t, base, cur)
	e, err := postgres.OpenExisting(ctx, withParam(withParam(base, "table", cur), "migrate", "true"))
	if err != nil {
		t.Fatalf("OpenExisting of a current table: %v", err)
	}
	defer e.Close()
	if recs, err := e.List(ctx, ""); err != nil || len(recs) != 1 || recs[0].Name != "n" {
		t.Errorf("List: %v, %v; want the lease n", recs, err)
	}
	if err := e.Release(ctx, "n", "o", 1); err != nil {
		t.Errorf("Release: %v", err)
	}
	if after, _ := objects(t, base, cur); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("OpenExisting created %v (before: %v)", after, before)
	}
}
