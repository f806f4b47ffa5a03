package cli

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/internal/randid"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// readOnlyCommands are the commands that never create a store.
var readOnlyCommands = [][]string{
	{"status"},
	{"release", "n", "--owner", "a", "--token", "1"},
	{"force-release", "--yes", "n"},
}

// missingStore returns the URL of a store whose table does not exist,
// the table's name, and a function that reports whether the engine still
// has no trace of the table; the table is dropped when the test ends.
type missingStore func() (url, table string, gone func() bool)

// checkNoStoreCreated runs each of readOnlyCommands on a store of its own
// whose table does not exist, and wants exit 64 naming the table and
// saying that nothing was created, and no trace of the table. Then "store
// init" makes one, and status lists it (exit 0).
func checkNoStoreCreated(t *testing.T, missing missingStore) {
	h := newHarness(t)
	for _, args := range readOnlyCommands {
		url, table, gone := missing()
		r := h.run(append(args, "--store", url)...)
		if r.code != ExitUsage || !strings.Contains(r.stderr, "table "+table+" does not exist") || !strings.Contains(r.stderr, "nothing was created") {
			t.Errorf("leasehold %s on a missing table: exit %d, stdout %q, stderr %q; want %d naming table %s",
				strings.Join(args, " "), r.code, r.stdout, r.stderr, ExitUsage, table)
		}
		if !gone() {
			t.Errorf("leasehold %s created the table %s (or part of it)", strings.Join(args, " "), table)
		}
	}
	url, _, _ := missing()
	if r := h.run("store", "init", "--store", url); r.code != 0 {
		t.Fatalf("store init: exit %d, %q", r.code, r.stderr)
	}
	if r := h.run("status", "--store", url); r.code != 0 || r.stdout != "no leases\n" {
		t.Errorf("status of the table store init made: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// TestReadOnlyCommandsCreateNoPostgresTable (red team of issue 29, item
// 1): status, release and force-release with table= naming a table that
// does not exist printed "no leases" (exit 0; the others 76) and created
// the table, its queue and records tables and its functions. They exit
// 64 naming the table, and nothing of it exists afterwards.
func TestReadOnlyCommandsCreateNoPostgresTable(t *testing.T) {
	base := enginetest.PostgresURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close) // after drop
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	checkNoStoreCreated(t, func() (string, string, func() bool) {
		table := "lh_cli_typo_" + randid.Hex(6)
		t.Cleanup(func() {
			for _, sql := range []string{
				"DROP TABLE IF EXISTS " + table + ", " + table + "_queue, " + table + "_records CASCADE",
				"DROP FUNCTION IF EXISTS " + table + "_wait, " + table + "_release, " + table + "_txn CASCADE",
			} {
				if _, err := pool.Exec(context.Background(), sql); err != nil {
					t.Errorf("%s: %v", sql, err)
				}
			}
		})
		gone := func() bool {
			var n int
			err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_class WHERE relname LIKE $1 || '%')
				+ (SELECT count(*) FROM pg_proc WHERE proname LIKE $1 || '%')`, table).Scan(&n)
			if err != nil {
				t.Fatal(err)
			}
			return n == 0
		}
		return base + sep + "table=" + table, table, gone
	})
}

// TestReadOnlyCommandsCreateNoDynamoDBTable (red team of issue 29, item
// 1): the same for a dynamodb:// URL naming a table that does not exist,
// which status, release and force-release created (dynalite).
func TestReadOnlyCommandsCreateNoDynamoDBTable(t *testing.T) {
	u, err := url.Parse(enginetest.DynamoDBURL(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	region := u.Query().Get("region")
	if region == "" {
		region = "us-east-1"
	}
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(region))
	if err != nil {
		t.Fatal(err)
	}
	client := ddb.NewFromConfig(cfg, func(o *ddb.Options) {
		if e := u.Query().Get("endpoint"); e != "" {
			o.BaseEndpoint = aws.String(e)
		}
	})
	checkNoStoreCreated(t, func() (string, string, func() bool) {
		table := "lh_cli_typo_" + randid.Hex(6)
		t.Cleanup(func() {
			_, err := client.DeleteTable(context.Background(), &ddb.DeleteTableInput{TableName: aws.String(table)})
			var nf *types.ResourceNotFoundException
			if err != nil && !errors.As(err, &nf) {
				t.Errorf("delete table %s: %v", table, err)
			}
		})
		gone := func() bool {
			_, err := client.DescribeTable(ctx, &ddb.DescribeTableInput{TableName: aws.String(table)})
			var nf *types.ResourceNotFoundException
			if err != nil && !errors.As(err, &nf) {
				t.Fatalf("is table %s there? %v", table, err)
			}
			return err != nil
		}
		s := *u
		s.Host = table
		return s.String(), table, gone
	})
}

// TestStatusDoesNotMigratePostgres (red team of issue 29, item 1: an
// older schema version opened read-only must not be migrated): status and
// release on a lease table of schema version 1 upgraded it in place (a
// queue table, functions, the comment "version 2"). They refuse it (exit
// 70, saying it is not migrated and how to upgrade it) and leave it as it
// was.
func TestStatusDoesNotMigratePostgres(t *testing.T) {
	base := enginetest.PostgresURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close) // after the drop
	table := "lh_cli_v1_" + randid.Hex(6)
	t.Cleanup(func() {
		pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+table+", "+table+"_queue, "+table+"_records CASCADE")
		pool.Exec(context.Background(), "DROP FUNCTION IF EXISTS "+table+"_wait, "+table+"_release, "+table+"_txn CASCADE")
	})
	for _, sql := range []string{
		`CREATE TABLE ` + table + ` (name text COLLATE "C" PRIMARY KEY, owner text NOT NULL, request_id text NOT NULL,
			token bigint NOT NULL CHECK (token > 0), data bytea NOT NULL, ttl_us bigint NOT NULL CHECK (ttl_us > 0),
			expires_at timestamptz NOT NULL, held boolean NOT NULL, acquired_at timestamptz NOT NULL)`,
		"COMMENT ON TABLE " + table + " IS 'leasehold lease table; schema version 1'",
		"INSERT INTO " + table + " VALUES ('n', 'old', '', 7, '', 60000000, now() + interval '1 minute', true, now())",
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	state := func() string {
		var s string
		err := pool.QueryRow(ctx, `SELECT obj_description($1::regclass, 'pg_class')
			|| ' ' || (SELECT count(*) FROM pg_class WHERE relname LIKE $1 || '%')
			|| ' ' || (SELECT count(*) FROM pg_proc WHERE proname LIKE $1 || '%')`, table).Scan(&s)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := state()
	h := newHarness(t)
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	for _, args := range [][]string{{"status"}, {"release", "n", "--owner", "old", "--token", "7"}} {
		r := h.run(append(args, "--store", base+sep+"table="+table)...)
		if r.code != ExitInternal || !strings.Contains(r.stderr, "schema version 1") || !strings.Contains(r.stderr, "never migrates") {
			t.Errorf("leasehold %s on a version 1 table: exit %d, stdout %q, stderr %q; want %d saying it is not migrated",
				strings.Join(args, " "), r.code, r.stdout, r.stderr, ExitInternal)
		}
		if after := state(); after != before {
			t.Errorf("leasehold %s changed the version 1 table: %q, before %q", strings.Join(args, " "), after, before)
		}
	}
}
