package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/randid"
	"github.com/leasehold/leasehold/postgres"
	"github.com/leasehold/leasehold/storekit"
	"github.com/leasehold/leasehold/storetest"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// recordsURL returns a URL with a lease table of the test's own; its
// records table (the lease table's name + "_records") is dropped with it.
func recordsURL(t *testing.T) (u, records string) {
	base := enginetest.PostgresURL(t)
	table := freshTable(t, base, "lh_test_rec_")
	t.Cleanup(func() { exec(t, base, "DROP TABLE IF EXISTS "+table+"_records") })
	return withParam(base, "table", table), table + "_records"
}

func TestRecords(t *testing.T) {
	u, _ := recordsURL(t)
	storetest.RunRecords(t, storetest.RecordsHarness{
		Open: func(t testing.TB) leasehold.RecordStore { return open(t, u) },
		Txn:  true,
	})
}

func TestRecordsTwoStores(t *testing.T) {
	u, _ := recordsURL(t)
	s1, s2 := open(t, u), open(t, u)
	defer s1.Close()
	defer s2.Close()
	res := storetest.CheckRecordHistories(ctxFor(t, 5*time.Minute), storetest.AlternateRecords(s1, s2), storetest.RecordHistoryConfig{Histories: 30})
	t.Logf("linearizability: %s", res)
	if !res.Passed() {
		t.Errorf("histories not linearizable: %s\n%s", res, res.FirstBad)
	}
}

// TestRecordsMigration: Open creates the records table beside the lease
// table, also for a lease table made before records existed; without
// migration a missing records table leaves the leases working and the
// record operations saying how to create it; a foreign table is refused.
func TestRecordsMigration(t *testing.T) {
	base := enginetest.PostgresURL(t)
	ctx := ctxFor(t, 2*time.Minute)
	u, records := recordsURL(t)
	s := open(t, u)
	if _, err := s.PutRecord(ctx, "k", []byte("v"), 0); err != nil {
		t.Fatalf("PutRecord on a new table: %v", err)
	}
	s.Close()

	// A lease table from before records: Open adds the records table.
	exec(t, base, "DROP TABLE "+records)
	s = open(t, u)
	if _, err := s.PutRecord(ctx, "k", []byte("v"), 0); err != nil {
		t.Fatalf("PutRecord after the records table was added: %v", err)
	}
	s.Close()

	// Without migration: leases work, records explain.
	exec(t, base, "DROP TABLE "+records)
	s = open(t, withParam(u, "migrate", "false"))
	if _, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "n", Owner: "o", TTL: time.Minute}); err != nil {
		t.Errorf("TryAcquire without a records table: %v", err)
	}
	if _, err := s.GetRecord(ctx, "k"); err == nil || !strings.Contains(err.Error(), "store init") {
		t.Errorf("GetRecord without a records table: %v, want advice to run leasehold store init", err)
	}
	if err := postgres.Init(ctx, u); err != nil {
		t.Fatalf("Init: %v", err)
	}
	if _, err := s.PutRecord(ctx, "k", []byte("v"), 0); err != nil {
		t.Errorf("PutRecord after Init: %v", err)
	}
	s.Close()

	// A table of that name that is not ours.
	exec(t, base, "DROP TABLE "+records)
	exec(t, base, "CREATE TABLE "+records+" (id int)")
	if _, err := postgres.Open(ctx, u); err == nil || !strings.Contains(err.Error(), "not a leasehold records table") {
		t.Errorf("Open with a foreign records table: %v", err)
	}
	exec(t, base, "COMMENT ON TABLE "+records+" IS 'leasehold record table; schema version 99'")
	if _, err := postgres.Open(ctx, u); err == nil || !strings.Contains(err.Error(), "version 99") {
		t.Errorf("Open with a newer records table: %v", err)
	}

	// Concurrent openers of a new lease table all succeed, and share one
	// records table.
	u2, _ := recordsURL(t)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := postgres.Open(ctx, u2)
			if err == nil {
				_, _, err = s.AddCounter(ctx, "n", 1)
				s.Close()
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Errorf("concurrent Open of a new table: %v", err)
		}
	}
	s = open(t, u2)
	defer s.Close()
	if r, err := s.GetRecord(ctx, "n"); err != nil || string(r.Value) != "8" {
		t.Errorf("counter after 8 openers = %q, %v", r.Value, err)
	}
}

func TestLockedTxn(t *testing.T) {
	u, _ := recordsURL(t)
	s := open(t, u)
	defer s.Close()
	ctx := ctxFor(t, 2*time.Minute)

	// Absent: not locked, fn conditions on absence.
	res, err := s.LockedTxn(ctx, "a", time.Second, func(cur leasehold.Versioned, exists bool) (leasehold.Txn, error) {
		if exists || cur.Key != "a" || cur.Version != 0 {
			return leasehold.Txn{}, fmt.Errorf("absent key seen as %+v, exists %v", cur, exists)
		}
		return leasehold.Txn{If: []leasehold.Condition{{Key: "a"}}, Then: []leasehold.Write{{Key: "a", Value: []byte("1")}, {Key: "log/1", Value: []byte("created")}}}, nil
	})
	if err != nil || res.Versions["a"] == 0 || res.Versions["log/1"] == 0 {
		t.Fatalf("LockedTxn on an absent key = %v, %v", res, err)
	}
	v1 := res.Versions["a"]

	// An error from fn rolls back and is returned as is.
	stop := errors.New("stop")
	if _, err := s.LockedTxn(ctx, "a", time.Second, func(leasehold.Versioned, bool) (leasehold.Txn, error) { return leasehold.Txn{}, stop }); err != stop {
		t.Errorf("LockedTxn with a failing fn: %v, want its error", err)
	}
	// A failing condition in fn's Txn is a conflict, and nothing changes.
	_, err = s.LockedTxn(ctx, "a", time.Second, func(cur leasehold.Versioned, exists bool) (leasehold.Txn, error) {
		return leasehold.Txn{If: []leasehold.Condition{{Key: "a", Version: cur.Version}, {Key: "log/1"}}, Then: []leasehold.Write{{Key: "a", Value: []byte("2")}}}, nil
	})
	var ce *leasehold.ConflictError
	if !errors.As(err, &ce) || ce.Key != "log/1" {
		t.Errorf("LockedTxn with a failing condition: %v, want a conflict on log/1", err)
	}
	// An invalid Txn from fn.
	if _, err := s.LockedTxn(ctx, "a", time.Second, func(leasehold.Versioned, bool) (leasehold.Txn, error) { return leasehold.Txn{}, nil }); !errors.Is(err, leasehold.ErrInvalid) {
		t.Errorf("LockedTxn whose fn returns no writes: %v, want ErrInvalid", err)
	}
	if r, err := s.GetRecord(ctx, "a"); err != nil || string(r.Value) != "1" || r.Version != v1 {
		t.Errorf("record after refused LockedTxns = %q@%d, %v", r.Value, r.Version, err)
	}

	// While one LockedTxn holds "a", another times out, and a plain put
	// waits for the lock.
	inside, release := make(chan struct{}), make(chan struct{})
	// fn waits for release holding a pooled connection: the store's Close
	// would wait for it for ever if the test ended before releasing it.
	letGo := sync.OnceFunc(func() { close(release) })
	defer letGo()
	held := make(chan error, 1)
	go func() {
		_, err := s.LockedTxn(ctx, "a", time.Second, func(cur leasehold.Versioned, exists bool) (leasehold.Txn, error) {
			close(inside)
			<-release
			return leasehold.Txn{Then: []leasehold.Write{{Key: "a", Value: []byte("held")}}}, nil
		})
		held <- err
	}()
	select {
	case <-inside:
	case err := <-held:
		t.Fatalf("the holding LockedTxn returned (%v) before it ran fn", err)
	case <-ctx.Done():
		t.Fatal("the holding LockedTxn did not run fn in time")
	}
	_, err = s.LockedTxn(ctx, "a", 50*time.Millisecond, func(leasehold.Versioned, bool) (leasehold.Txn, error) {
		return leasehold.Txn{}, errors.New("ran without the lock")
	})
	if !errors.Is(err, leasehold.ErrLockTimeout) {
		t.Errorf("LockedTxn while another holds the lock: %v, want ErrLockTimeout", err)
	}
	if _, err := s.LockedTxn(ctx, "a", 0, func(leasehold.Versioned, bool) (leasehold.Txn, error) {
		return leasehold.Txn{}, errors.New("ran without the lock")
	}); !errors.Is(err, leasehold.ErrLockTimeout) {
		t.Errorf("LockedTxn without waiting while another holds the lock: %v, want ErrLockTimeout", err)
	}
	put := make(chan error, 1)
	go func() {
		_, err := s.PutRecord(ctx, "a", []byte("after"), v1)
		put <- err
	}()
	select {
	case err := <-put:
		t.Errorf("PutRecord returned (%v) while the row was locked", err)
	case <-time.After(100 * time.Millisecond):
	}
	letGo()
	if err := recvErr(t, held, "the holding LockedTxn"); err != nil {
		t.Fatalf("the holding LockedTxn: %v", err)
	}
	if err := recvErr(t, put, "PutRecord"); !errors.As(err, &ce) || ce.Actual != v1+1 {
		t.Errorf("PutRecord queued behind the lock: %v, want a conflict with the holder's version %d", err, v1+1)
	}

	// 32 pessimistic incrementers: no conflict, no lost increment.
	const workers, each = 32, 5
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				_, err := s.LockedTxn(ctx, "n", time.Minute, func(cur leasehold.Versioned, exists bool) (leasehold.Txn, error) {
					if !exists {
						return leasehold.Txn{If: []leasehold.Condition{{Key: "n"}}, Then: []leasehold.Write{{Key: "n", Value: []byte("1")}}}, nil
					}
					n, err := storekit.ParseCounter("n", cur.Value)
					if err != nil {
						return leasehold.Txn{}, err
					}
					return leasehold.Txn{If: []leasehold.Condition{{Key: "n", Version: cur.Version}}, Then: []leasehold.Write{{Key: "n", Value: []byte(strconv.FormatInt(n+1, 10))}}}, nil
				})
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	// Only the first increments can meet a conflict: those that found the
	// key absent (unlocked) race to create it.
	conflicts := 0
	for _, err := range errs {
		if !errors.Is(err, leasehold.ErrConflict) {
			t.Error(err)
		}
		conflicts++
	}
	if r, err := s.GetRecord(ctx, "n"); err != nil || string(r.Value) != strconv.Itoa(workers*each-conflicts) {
		t.Errorf("counter after %d locked increments (%d conflicts) = %q, %v", workers*each, conflicts, r.Value, err)
	}
	if conflicts > workers-1 {
		t.Errorf("%d conflicts: more than the racing creations can explain", conflicts)
	}
}

// TestRecordsWriteSkew: two transactions that each require the other's
// key to be absent and create their own cannot both commit (absent keys
// are locked too).
func TestRecordsWriteSkew(t *testing.T) {
	u, _ := recordsURL(t)
	s := open(t, u)
	defer s.Close()
	ctx := ctxFor(t, 2*time.Minute)
	for round := 0; round < 50; round++ {
		x, y := fmt.Sprintf("x%d", round), fmt.Sprintf("y%d", round)
		var wg sync.WaitGroup
		var ok atomic.Int32
		for _, pair := range [][2]string{{x, y}, {y, x}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := s.Txn(ctx, leasehold.Txn{If: []leasehold.Condition{{Key: pair[1]}}, Then: []leasehold.Write{{Key: pair[0], Value: []byte("1")}}})
				switch {
				case err == nil:
					ok.Add(1)
				case !errors.Is(err, leasehold.ErrConflict):
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if ok.Load() != 1 {
			t.Fatalf("round %d: %d of the two skewed transactions committed, want 1", round, ok.Load())
		}
	}
}

// TestRecordsPoolOfCaller: New on a caller's pool finds the records table
// Migrate created.
func TestRecordsPoolOfCaller(t *testing.T) {
	u, _ := recordsURL(t)
	ctx := ctxFor(t, time.Minute)
	base, _, _ := strings.Cut(u, "?")
	table := u[strings.Index(u, "table=")+len("table="):]
	pool, err := pgxpool.New(ctx, base+"?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := postgres.Migrate(ctx, pool, table); err != nil {
		t.Fatal(err)
	}
	s, err := postgres.New(ctx, pool, postgres.WithTable(table), postgres.WithoutMigrate())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n, v, err := s.AddCounter(ctx, "n", 3); err != nil || n != 3 || v != 1 {
		t.Errorf("AddCounter = %d@%d, %v; want 3@1", n, v, err)
	}
}

// TestRecordsRefusedForUnseenRow: a create-only put (or an add to a
// non-counter) that waits for a concurrent insert of its key is refused for
// a row its statement's snapshot cannot see; it must still report the
// version found (by running the statement again), not "absent".
func TestRecordsRefusedForUnseenRow(t *testing.T) {
	base := enginetest.PostgresURL(t)
	u, records := recordsURL(t)
	s := open(t, u)
	defer s.Close()
	ctx := ctxFor(t, 2*time.Minute)
	pool, err := pgxpool.New(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, c := range []struct {
		what string
		call func(key string) error
		want func(err error) bool
	}{
		{"create", func(k string) error { _, err := s.PutRecord(ctx, k, []byte("mine"), 0); return err },
			func(err error) bool {
				var ce *leasehold.ConflictError
				return errors.As(err, &ce) && ce.Expected == 0 && ce.Actual == 1
			}},
		{"add", func(k string) error { _, _, err := s.AddCounter(ctx, k, 1); return err },
			func(err error) bool {
				return errors.Is(err, leasehold.ErrInvalid) && strings.Contains(err.Error(), "not a counter")
			}},
	} {
		k := "unseen/" + c.what
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+records+" (key, value, version) VALUES ($1, 'theirs', 1)", k); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- c.call(k) }()
		// Wait until the store's statement waits for the insert's lock.
		waitFor(t, 30*time.Second, func() bool {
			var n int
			err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE wait_event_type = 'Lock' AND query LIKE '%'||$1||'%'`, records).Scan(&n)
			return err == nil && n > 0
		})
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; !c.want(err) {
			t.Errorf("%s refused for a row inserted concurrently: %v", c.what, err)
		}
	}
}

// TestRecordsWithoutCreatePrivilege: a role that may use an existing lease
// table but not create tables (a deployment from before records) still
// opens the store and uses its leases; records say how to create their
// table, and Init as that role fails saying why.
func TestRecordsWithoutCreatePrivilege(t *testing.T) {
	base := enginetest.PostgresURL(t)
	if !strings.Contains(base, "://postgres@") {
		t.Skip("the test URL does not name the postgres superuser")
	}
	ctx := ctxFor(t, 2*time.Minute)
	u, records := recordsURL(t)
	owner := open(t, u)
	queue := postgres.QueueTable(owner)
	owner.Close()
	exec(t, base, "DROP TABLE "+records)
	table := u[strings.Index(u, "table=")+len("table="):]
	role := "lh_test_role_" + randid.Hex(6)
	exec(t, base, "CREATE ROLE "+role+" LOGIN")
	t.Cleanup(func() {
		exec(t, base, "DROP OWNED BY "+role)
		exec(t, base, "DROP ROLE "+role)
	})
	exec(t, base, "GRANT SELECT, INSERT, UPDATE ON "+table+" TO "+role)
	exec(t, base, "GRANT SELECT, INSERT, UPDATE, DELETE ON "+queue+" TO "+role)
	ru := strings.Replace(u, "://postgres@", "://"+role+"@", 1)
	pool, err := pgxpool.New(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	var canCreate bool
	err = pool.QueryRow(ctx, "SELECT has_schema_privilege($1, 'public', 'CREATE')", role).Scan(&canCreate)
	pool.Close()
	if err != nil || canCreate {
		t.Skipf("a new role may create tables in public here (PostgreSQL before 15): %v", err)
	}

	s := open(t, ru)
	defer s.Close()
	if _, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "n", Owner: "o", TTL: time.Minute}); err != nil {
		t.Errorf("TryAcquire as a role without CREATE: %v", err)
	}
	// The queue works with those rights: a waiter enqueues (its identity
	// value needs no privilege on the sequence) and leaves.
	if _, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "q", Owner: "holder", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = s.AcquireWait(wctx, leasehold.AcquireRequest{Name: "q", Owner: "waiter", TTL: time.Minute})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("AcquireWait as a role without CREATE: %v, want it to wait until its deadline", err)
	}
	if _, err := s.PutRecord(ctx, "k", []byte("v"), 0); err == nil || !strings.Contains(err.Error(), "store init") {
		t.Errorf("PutRecord without a records table: %v, want advice to run leasehold store init", err)
	}
	if err := postgres.Init(ctx, ru); err == nil || !strings.Contains(err.Error(), "CREATE privilege") {
		t.Errorf("Init as a role without CREATE: %v, want an error saying so", err)
	}
	if err := postgres.Init(ctx, u); err != nil {
		t.Fatalf("Init as the owner: %v", err)
	}
	exec(t, base, "GRANT SELECT, INSERT, UPDATE ON "+records+" TO "+role)
	if _, err := s.PutRecord(ctx, "k", []byte("v"), 0); err != nil {
		t.Errorf("PutRecord after Init: %v", err)
	}
}

// roundTrips counts what a pgx connection sends: queries, batches and
// statement preparations, each at least one round trip.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}
func (r *roundTrips) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (r *roundTrips) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

// TestRoundTrips: on a warm connection, Txn (applied or refused), and each
// lease operation, is one round trip: the uncontended TryAcquire (its fast
// path grants) and Release, and a TryAcquire refused by a live holder.
func TestRoundTrips(t *testing.T) {
	u, _ := recordsURL(t)
	ctx := ctxFor(t, time.Minute)
	cfg, err := pgxpool.ParseConfig(u[:strings.Index(u, "?")] + "?" + strings.Join(slicesWithout(strings.Split(u[strings.Index(u, "?")+1:], "&"), "table="), "&"))
	if err != nil {
		t.Fatal(err)
	}
	trips := &roundTrips{}
	cfg.ConnConfig.Tracer = trips
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s, err := postgres.New(ctx, pool, postgres.WithTable(u[strings.Index(u, "table=")+len("table="):]))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	count := func(what string, fn func() error) {
		t.Helper()
		for i := 0; i < 2; i++ { // the first call prepares the statement
			before := trips.n.Load()
			if err := fn(); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if got := trips.n.Load() - before; i == 1 && got != 1 {
				t.Errorf("%s: %d round trips, want 1", what, got)
			}
		}
	}
	var v uint64
	count("Txn", func() error {
		res, err := s.Txn(ctx, leasehold.Txn{
			If:   []leasehold.Condition{{Key: "a", Version: v}},
			Then: []leasehold.Write{{Key: "a", Value: []byte("x")}, {Key: "c", Add: 1}},
		})
		v = res.Versions["a"]
		return err
	})
	count("Txn refused", func() error {
		_, err := s.Txn(ctx, leasehold.Txn{If: []leasehold.Condition{{Key: "a", Version: 99}}, Then: []leasehold.Write{{Key: "b", Delete: true}}})
		var ce *leasehold.ConflictError
		if !errors.As(err, &ce) || ce.Actual != v {
			return fmt.Errorf("refusal %v, want a conflict at version %d", err, v)
		}
		return nil
	})
	count("TryAcquire", func() error {
		rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "u", Owner: "o", TTL: time.Minute})
		if err != nil {
			return err
		}
		before := trips.n.Load()
		err = s.Release(ctx, "u", "o", rec.Token)
		trips.n.Store(before) // count the acquire alone
		return err
	})
	if _, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "h", Owner: "o", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	count("TryAcquire refused", func() error {
		_, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "h", Owner: "other", TTL: time.Minute})
		var he *leasehold.HeldError
		if !errors.As(err, &he) || he.Owner != "o" {
			return fmt.Errorf("refusal %v, want held by o", err)
		}
		return nil
	})
	count("TryAcquire+Release", func() error {
		before := trips.n.Load()
		rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "n", Owner: "o", TTL: time.Minute})
		if err != nil {
			return err
		}
		if err := s.Renew(ctx, "n", "o", rec.Token, time.Minute); err != nil {
			return err
		}
		trips.n.Store(before) // count the release alone
		return s.Release(ctx, "n", "o", rec.Token)
	})
}

func slicesWithout(parts []string, prefix string) []string {
	var out []string
	for _, p := range parts {
		if !strings.HasPrefix(p, prefix) {
			out = append(out, p)
		}
	}
	return out
}
