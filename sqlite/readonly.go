package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"
)

// OpenReadOnly opens the existing store file at path for reading only, for
// a process that may read the file but not write it or its directory (a
// store made by another user: "leasehold status" run by someone else). It
// creates and writes nothing: no file, directory, schema, -wal or -shm
// file. Get and List work; every write (TryAcquire, Renew, Release, the
// records) fails with a *ReadOnlyError, and Watch is not available.
//
// A store in WAL mode is read by SQLite with its -wal and -shm files, which
// a reader without write access to the directory cannot create. So:
//
//   - while a process has the store open (its -wal file exists), SQLite
//     reads it read-only with those files, as any reader does (its
//     read-only -shm support), and sees every commit;
//   - when no process has it open (no -wal file: every commit is in the
//     file itself), the file is read as it is (SQLite's immutable=1: no
//     -shm, no lock), and the read counts only if the file did not change
//     under it (same size, modification time and inode before and after,
//     and still no -wal file); otherwise it is read again, up to
//     roAttempts times, after which the read fails with an error saying so.
//
// A file that does not exist is an error matching fs.ErrNotExist; a file
// without leasehold's tables is refused.
func OpenReadOnly(path string, opts ...Option) (*Store, error) {
	s, err := newStore(path, opts)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	q := url.Values{}
	q.Add("mode", "ro")
	q.Add("_pragma", "busy_timeout(30000)")
	wal, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s read-only: %w", path, err)
	}
	wal.SetMaxOpenConns(4)
	q.Add("immutable", "1")
	imm, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		wal.Close()
		return nil, fmt.Errorf("sqlite: open %s read-only: %w", path, err)
	}
	// An immutable connection never looks for changes, so its page cache
	// would outlive one: every read takes a fresh connection.
	imm.SetMaxIdleConns(0)
	s.db, s.ro = wal, &roFiles{path: path, imm: imm}
	s.watch.init(s)
	var version string
	err = s.readDB(func(db *sql.DB) error {
		return db.QueryRow(`SELECT value FROM leasehold_meta WHERE key = 'schema_version'`).Scan(&version)
	})
	if err != nil {
		s.Close()
		if strings.Contains(err.Error(), "no such table") || errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("sqlite: %s is not a leasehold store (it has no leasehold_meta table or schema version), and this user may not write it to make it one", path)
		}
		return nil, fmt.Errorf("sqlite: read %s read-only: %w", path, err)
	}
	return s, nil
}

// roAttempts bounds the reads of a read-only store whose file changes
// under each of them.
const roAttempts = 5

// roFiles is what a read-only Store reads through besides s.db (the
// read-only connections, which need the -wal and -shm files).
type roFiles struct {
	path string
	imm  *sql.DB // immutable=1: the file as it is, without -wal and -shm
}

// readDB runs fn, a read, on the database to read from: s.db, or for a
// read-only store, as OpenReadOnly describes.
func (s *Store) readDB(fn func(db *sql.DB) error) error {
	if s.ro == nil {
		return fn(s.db)
	}
	var err error
	for range roAttempts {
		before, serr := os.Stat(s.ro.path)
		if serr != nil {
			return fmt.Errorf("sqlite: %w", serr)
		}
		if exists(s.ro.path + "-wal") {
			err = fn(s.db)
			if err == nil || !isReadOnly(err) && !strings.Contains(err.Error(), "unable to open") {
				return err
			}
			continue // the last writer closed the store meanwhile, and its -shm went
		}
		err = fn(s.ro.imm)
		after, serr := os.Stat(s.ro.path)
		if serr == nil && !exists(s.ro.path+"-wal") && sameFile(before, after) {
			return err
		}
	}
	return fmt.Errorf("sqlite: %s changed while it was read, %d times (it is read without locks, as this user may not write it); try again: %v", s.ro.path, roAttempts, err)
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return !errors.Is(err, fs.ErrNotExist)
}

// sameFile reports whether two stats of a path show the same unchanged
// file.
func sameFile(a, b fs.FileInfo) bool {
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// ReadOnlyError is the error of a write to a store opened with
// OpenReadOnly.
type ReadOnlyError struct {
	Path string
}

func (e *ReadOnlyError) Error() string {
	return fmt.Sprintf("sqlite: %s is open read-only, as this user may not write it: taking, renewing or releasing a lease needs write access to the file and to its directory (for the -wal and -shm files beside it)", e.Path)
}

// writable returns a *ReadOnlyError for a read-only store, and ctx's
// error.
func (s *Store) writable(ctx context.Context) error {
	if s.ro != nil {
		return &ReadOnlyError{Path: s.path}
	}
	return ctx.Err()
}

// isReadOnly reports SQLite's SQLITE_READONLY (and its extended codes,
// such as SQLITE_READONLY_DIRECTORY, 1544): the file or its directory may
// not be written.
func isReadOnly(err error) bool {
	return err != nil && strings.Contains(err.Error(), "attempt to write a readonly database")
}

// noWriteError is Open's error for a store this process may not write.
func noWriteError(path, doing string, err error) error {
	return fmt.Errorf("sqlite: this user (uid %d) may not write the store %s (%v): %s needs write access to the file and to its directory (for the -wal and -shm files SQLite makes beside it); ask its owner for access, or use a store of your own (--store); reading it (leasehold status) needs only read access", os.Getuid(), path, err, doing)
}
