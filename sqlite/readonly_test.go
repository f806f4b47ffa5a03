package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// TestReadOnlyReadsAgainAfterAChange: a read of a read-only store whose
// file changed under it (a writer opened it and committed, so that a -wal
// file appeared; or a writer committed and closed, which checkpoints into
// the file) does not count: it is read again, and the second read sees the
// change. The fault is made from inside the first read, so the order is
// fixed.
func TestReadOnlyReadsAgainAfterAChange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	path := filepath.Join(t.TempDir(), "leases.db")
	acquire := func(name string) *Store {
		w, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.TryAcquire(ctx, leasehold.AcquireRequest{Name: name, Owner: "o", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		return w
	}
	acquire("x/1").Close()
	r, err := OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var open *Store // the writer of the second case, closed at the end
	defer func() {
		if open != nil {
			open.Close()
		}
	}()
	for _, tc := range []struct {
		what   string
		change func() // made during the first read
		want   []string
	}{
		{"a writer committed and closed (the file changed)", func() { acquire("x/2").Close() }, []string{"x/1", "x/2"}},
		{"a writer opened the store and committed (a -wal file appeared)", func() { open = acquire("x/3") }, []string{"x/1", "x/2", "x/3"}},
	} {
		var calls int
		var names []string
		err := r.readDB(func(db *sql.DB) error {
			calls++
			recs, err := r.list(ctx, db, "")
			names = names[:0]
			for _, rec := range recs {
				names = append(names, rec.Name)
			}
			if calls == 1 {
				tc.change()
			}
			return err
		})
		if err != nil || calls != 2 || !slices.Equal(names, tc.want) {
			t.Errorf("%s: %d reads, names %q, %v; want 2 reads and %q", tc.what, calls, names, err, tc.want)
		}
	}
}

// TestReadOnlyCreatesNothing: OpenReadOnly refuses a file that is not a
// leasehold store and one that does not exist, leaving them as they were
// (no schema, no file, no -wal or -shm); writes to a read-only store are a
// *ReadOnlyError.
func TestReadOnlyCreatesNothing(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenReadOnly(empty); err == nil || !strings.Contains(err.Error(), "not a leasehold store") {
		t.Errorf("OpenReadOnly of an empty file: %v, want it refused", err)
	}
	if _, err := OpenReadOnly(filepath.Join(dir, "missing.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("OpenReadOnly of a missing file: %v, want fs.ErrNotExist", err)
	}
	path := filepath.Join(dir, "leases.db")
	w, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	r, err := OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var ro *ReadOnlyError
	if _, err := r.TryAcquire(ctx, leasehold.AcquireRequest{Name: "n", Owner: "o", TTL: time.Minute}); !errors.As(err, &ro) {
		t.Errorf("TryAcquire: %v, want a *ReadOnlyError", err)
	}
	if err := r.Release(ctx, "n", "o", 1); !errors.As(err, &ro) {
		t.Errorf("Release: %v, want a *ReadOnlyError", err)
	}
	if _, err := r.PutRecord(ctx, "k", []byte("v"), 0); !errors.As(err, &ro) {
		t.Errorf("PutRecord: %v, want a *ReadOnlyError", err)
	}
	if _, err := r.Watch(ctx, "n"); !errors.As(err, &ro) {
		t.Errorf("Watch: %v, want a *ReadOnlyError", err)
	}
	if _, err := r.GetRecord(ctx, "k"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Errorf("GetRecord: %v, want not found", err)
	}
	es, _ := os.ReadDir(dir)
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	if want := []string{"empty.db", "leases.db"}; !slices.Equal(names, want) {
		t.Errorf("files %q, want %q", names, want)
	}
	if fi, err := os.Stat(empty); err != nil || fi.Size() != 0 {
		t.Errorf("the empty file: %v, %v; want it left empty", fi, err)
	}
}
