package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"strconv"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storekit"
)

var _ leasehold.RecordStore = (*Store)(nil)

// Versioned records live in the leasehold_records table: one row per key
// with its value and version. Versions count per key (1, 2, 3, ...). A
// delete sets the value to NULL and keeps the row, so that the key's next
// version is above every earlier one and a version read before the delete
// never matches again.
//
// GetRecord is one statement. Every write (put, delete, add, Txn) is one
// BEGIN IMMEDIATE transaction: it takes the file's write lock first, reads
// the rows it conditions on, decides in Go, writes and commits (one commit,
// one fsync). Holding the write lock from the read on is what makes the
// read-decide-write atomic against every other connection and process; it
// also lets a conflict report the exact version found. Writers of this
// process queue on writeMu, as the lease writes do; other processes wait on
// SQLite's lock (busy_timeout).

const (
	selectRecordSQL = `SELECT value, version, value IS NOT NULL FROM leasehold_records WHERE key = ?1`
	getRecordSQL    = `SELECT value, version FROM leasehold_records WHERE key = ?1 AND value IS NOT NULL`
	writeRecordSQL  = `INSERT INTO leasehold_records(key, value, version) VALUES (?1, ?2, ?3)
	ON CONFLICT(key) DO UPDATE SET value = excluded.value, version = excluded.version`
	deleteRecordSQL = `UPDATE leasehold_records SET value = NULL WHERE key = ?1`
)

// recRow is a key's row as a transaction read it.
type recRow struct {
	value   []byte
	version uint64 // the live record's version, or the deleted one's (0: never written)
	live    bool
}

func (r recRow) conflict(key string, expect uint64) error {
	e := &leasehold.ConflictError{Key: key, Expected: expect}
	if r.live {
		e.Actual = r.version
	}
	return e
}

// holds reports whether the record is at version expect (0: absent).
func (r recRow) holds(expect uint64) bool {
	if expect == 0 {
		return !r.live
	}
	return r.live && r.version == expect
}

// recTx is one BEGIN IMMEDIATE transaction (the DSN's _txlock) around fn.
// Errors from fn are returned as they are, after a rollback.
func (s *Store) recTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if err := s.writable(ctx); err != nil {
		return err
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return translate(err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		var ce *leasehold.ConflictError
		var ie *leasehold.InvalidError
		if ctx.Err() != nil && !errors.As(err, &ce) && !errors.As(err, &ie) && !errors.Is(err, leasehold.ErrNotFound) {
			return ctx.Err() // database/sql rolled back when ctx ended
		}
		return err
	}
	if err := tx.Commit(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return translate(err)
	}
	return nil
}

func readRec(ctx context.Context, tx *sql.Tx, key string) (recRow, error) {
	var r recRow
	var version int64
	// The driver scans an empty BLOB as nil, so liveness is asked for.
	err := tx.QueryRowContext(ctx, selectRecordSQL, key).Scan(&r.value, &version, &r.live)
	if errors.Is(err, sql.ErrNoRows) {
		return recRow{}, nil
	}
	if err != nil {
		return recRow{}, translate(err)
	}
	r.version = uint64(version)
	return r, nil
}

// writeRec stores value (not nil: NULL marks a deleted record) at the
// version after prev's.
func writeRec(ctx context.Context, tx *sql.Tx, key string, value []byte, prev recRow) (uint64, error) {
	if value == nil {
		value = []byte{}
	}
	v := prev.version + 1
	if _, err := tx.ExecContext(ctx, writeRecordSQL, key, value, int64(v)); err != nil {
		return 0, translate(err)
	}
	return v, nil
}

func deleteRec(ctx context.Context, tx *sql.Tx, key string) error {
	_, err := tx.ExecContext(ctx, deleteRecordSQL, key)
	return translate(err)
}

// addTo is the counter of row r plus delta, as a record value.
func addTo(key string, r recRow, delta int64) (int64, []byte, error) {
	n := int64(0)
	if r.live {
		var err error
		if n, err = storekit.ParseCounter(key, r.value); err != nil {
			return 0, nil, err
		}
	}
	n, err := storekit.AddInt64(key, n, delta)
	if err != nil {
		return 0, nil, err
	}
	return n, strconv.AppendInt(nil, n, 10), nil
}

// GetRecord implements leasehold.RecordStore.
func (s *Store) GetRecord(ctx context.Context, key string) (leasehold.Versioned, error) {
	if err := storekit.ValidateKey(key); err != nil {
		return leasehold.Versioned{}, err
	}
	if err := ctx.Err(); err != nil {
		return leasehold.Versioned{}, err
	}
	r := leasehold.Versioned{Key: key}
	var version int64
	err := s.readDB(func(db *sql.DB) error {
		return db.QueryRowContext(ctx, getRecordSQL, key).Scan(&r.Value, &version)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return leasehold.Versioned{}, leasehold.ErrNotFound
	}
	if err != nil {
		return leasehold.Versioned{}, translate(err)
	}
	r.Version = uint64(version)
	if r.Value == nil {
		r.Value = []byte{}
	}
	return r, nil
}

// PutRecord implements leasehold.RecordStore.
func (s *Store) PutRecord(ctx context.Context, key string, value []byte, expect uint64) (uint64, error) {
	if err := storekit.ValidatePut(key, value); err != nil {
		return 0, err
	}
	var v uint64
	err := s.recTx(ctx, func(tx *sql.Tx) error {
		cur, err := readRec(ctx, tx, key)
		if err != nil {
			return err
		}
		if !cur.holds(expect) {
			return cur.conflict(key, expect)
		}
		v, err = writeRec(ctx, tx, key, value, cur)
		return err
	})
	return v, err
}

// DeleteRecord implements leasehold.RecordStore.
func (s *Store) DeleteRecord(ctx context.Context, key string, expect uint64) error {
	if err := storekit.ValidateKey(key); err != nil {
		return err
	}
	return s.recTx(ctx, func(tx *sql.Tx) error {
		cur, err := readRec(ctx, tx, key)
		switch {
		case err != nil:
			return err
		case !cur.live:
			return leasehold.ErrNotFound
		case cur.version != expect:
			return cur.conflict(key, expect)
		}
		return deleteRec(ctx, tx, key)
	})
}

// AddCounter implements leasehold.RecordStore.
func (s *Store) AddCounter(ctx context.Context, key string, delta int64) (int64, uint64, error) {
	if err := storekit.ValidateKey(key); err != nil {
		return 0, 0, err
	}
	var n int64
	var v uint64
	err := s.recTx(ctx, func(tx *sql.Tx) error {
		cur, err := readRec(ctx, tx, key)
		if err != nil {
			return err
		}
		var value []byte
		if n, value, err = addTo(key, cur, delta); err != nil {
			return err
		}
		v, err = writeRec(ctx, tx, key, value, cur)
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	return n, v, nil
}

// Txn implements leasehold.RecordStore: one BEGIN IMMEDIATE transaction
// that checks the conditions in order, then applies the writes in order; a
// failing condition or write rolls everything back.
func (s *Store) Txn(ctx context.Context, txn leasehold.Txn) (leasehold.TxnResult, error) {
	if err := txn.Validate(); err != nil {
		return leasehold.TxnResult{}, err
	}
	res := leasehold.TxnResult{Versions: make(map[string]uint64, len(txn.Then))}
	err := s.recTx(ctx, func(tx *sql.Tx) error {
		for _, c := range txn.If {
			cur, err := readRec(ctx, tx, c.Key)
			if err != nil {
				return err
			}
			if !cur.holds(c.Version) {
				return cur.conflict(c.Key, c.Version)
			}
		}
		for _, w := range txn.Then {
			cur, err := readRec(ctx, tx, w.Key)
			if err != nil {
				return err
			}
			switch {
			case w.Delete:
				res.Versions[w.Key] = 0
				if cur.live {
					err = deleteRec(ctx, tx, w.Key)
				}
			case w.Add != 0 && w.Value == nil:
				var value []byte
				if _, value, err = addTo(w.Key, cur, w.Add); err == nil {
					res.Versions[w.Key], err = writeRec(ctx, tx, w.Key, value, cur)
				}
			default:
				res.Versions[w.Key], err = writeRec(ctx, tx, w.Key, w.Value, cur)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return leasehold.TxnResult{}, err
	}
	return res, nil
}
