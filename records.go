package leasehold

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/leasehold/leasehold/internal/backoff"
	"github.com/leasehold/leasehold/internal/check"
)

// Versioned records: the second small interface a store may implement,
// for many writers on the same rows or items (compare-and-set by version,
// atomic add, multi-key transactions). Records live in their own namespace,
// apart from leases.

// MaxValueLen is the largest record value, in bytes.
const MaxValueLen = check.MaxValueLen

// MaxTxnOps is the most conditions plus writes one transaction may carry
// (DynamoDB's TransactWriteItems allows 100 items).
const MaxTxnOps = 100

// Versioned is a record with its version. Versions are positive and
// strictly increase with every write of the key (they are opaque: not
// necessarily consecutive), deletes included: a key created again after a
// delete gets a version above all its earlier ones, so that a version read
// before the delete never matches again. Version 0 means "absent" wherever
// a version is expected.
type Versioned struct {
	Key     string
	Value   []byte
	Version uint64
}

// RecordStore is implemented by stores that keep versioned records. Each
// method is one atomic operation on the engine. Keys follow the rules of
// lease names (see MaxNameLen); values are at most MaxValueLen bytes.
type RecordStore interface {
	// GetRecord returns the record, or ErrNotFound.
	GetRecord(ctx context.Context, key string) (Versioned, error)
	// PutRecord writes value if the record's current version is expect
	// (0: only if the key is absent) and returns the new version; otherwise
	// it returns a *ConflictError and changes nothing.
	PutRecord(ctx context.Context, key string, value []byte, expect uint64) (uint64, error)
	// DeleteRecord deletes the record if its version is expect; otherwise a
	// *ConflictError (ErrNotFound if it is absent). Nothing changes on error.
	DeleteRecord(ctx context.Context, key string, expect uint64) error
	// AddCounter adds delta to the counter at key (created at 0 when
	// absent) and returns the new value and version. A counter is a record
	// whose value is a decimal int64 ("42"); adding to a record that is not
	// a counter is an *InvalidError. Overflow is an *InvalidError too.
	AddCounter(ctx context.Context, key string, delta int64) (value int64, version uint64, err error)
	// Txn checks every condition and, only if all hold, applies every
	// write, atomically. It returns the new versions of the written keys
	// (0 for deletes), or a *ConflictError naming the first condition that
	// failed (nothing changed), or ErrTxnUnsupported where the engine has no
	// multi-key transactions.
	Txn(ctx context.Context, txn Txn) (TxnResult, error)
}

// Txn is a multi-key transaction: conditions on versions and writes.
type Txn struct {
	// If lists version conditions: Version 0 means the key must be absent.
	If []Condition
	// Then lists the writes, applied in order if every condition holds. A
	// key may appear at most once among the writes.
	Then []Write
}

// Condition requires key to be at Version (0: absent).
type Condition struct {
	Key     string
	Version uint64
}

// Write sets a key's value, deletes it, or adds to a counter. A write with
// none of them set writes an empty value. Deleting an absent key is a no-op
// (condition on the key to require it).
type Write struct {
	Key    string
	Value  []byte
	Delete bool
	// Add, when non-zero (and Value nil, Delete false), adds to the counter
	// at Key as AddCounter does.
	Add int64
}

// TxnResult reports the versions the transaction wrote.
type TxnResult struct {
	Versions map[string]uint64 // key → new version (0 for a delete)
}

// ErrConflict is matched (errors.Is) by every *ConflictError.
var ErrConflict = errors.New("version conflict")

// ErrTxnUnsupported reports a store (or endpoint) without multi-key
// transactions, e.g. dynalite, which lacks TransactWriteItems.
var ErrTxnUnsupported = errors.New("multi-key transactions are not supported by this store")

// ConflictError reports a version condition that did not hold. Nothing was
// changed.
type ConflictError struct {
	Key      string
	Expected uint64 // the version asked for (0: absent)
	Actual   uint64 // the version found (0: absent), when the store reports it
}

func (e *ConflictError) Error() string {
	want := "absent"
	if e.Expected != 0 {
		want = "version " + strconv.FormatUint(e.Expected, 10)
	}
	got := "absent"
	if e.Actual != 0 {
		got = "version " + strconv.FormatUint(e.Actual, 10)
	}
	return fmt.Sprintf("record %q: expected %s, found %s", e.Key, want, got)
}

// Is makes errors.Is(err, ErrConflict) true for a *ConflictError.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// Validate checks a transaction: valid keys and values, at most MaxTxnOps
// entries, at least one write, no key written twice, no key conditioned
// twice, and each write doing exactly one thing.
func (t Txn) Validate() error {
	if len(t.Then) == 0 {
		return invalid("txn", "no writes")
	}
	if n := len(t.If) + len(t.Then); n > MaxTxnOps {
		return invalid("txn", "%d conditions and writes, more than the limit of %d", n, MaxTxnOps)
	}
	seen := map[string]bool{}
	for _, c := range t.If {
		if p := check.Key(c.Key); p != nil {
			return asInvalid(p)
		}
		if seen[c.Key] {
			return invalid("txn", "key %q has two conditions", c.Key)
		}
		seen[c.Key] = true
	}
	clear(seen)
	for _, w := range t.Then {
		if p := check.Key(w.Key); p != nil {
			return asInvalid(p)
		}
		if p := check.Value(w.Value); p != nil {
			return asInvalid(p)
		}
		if seen[w.Key] {
			return invalid("txn", "key %q is written twice", w.Key)
		}
		seen[w.Key] = true
		kinds := 0
		if w.Value != nil {
			kinds++
		}
		if w.Delete {
			kinds++
		}
		if w.Add != 0 {
			kinds++
		}
		if kinds > 1 {
			return invalid("txn", "write of %q sets more than one of Value, Delete and Add", w.Key)
		}
	}
	return nil
}

// UpdateOptions bound Update's retries.
type UpdateOptions struct {
	// MaxAttempts is how many read-modify-write attempts Update makes
	// (default 10).
	MaxAttempts int
	// BackoffMin and BackoffMax bound the jittered exponential backoff
	// between attempts (defaults 2ms and 200ms).
	BackoffMin, BackoffMax time.Duration
}

// RetriesExhaustedError reports an Update that conflicted on every
// attempt. It matches ErrConflict with errors.Is.
type RetriesExhaustedError struct {
	Key      string
	Attempts int
	Last     *ConflictError
}

func (e *RetriesExhaustedError) Error() string {
	return fmt.Sprintf("record %q: still conflicting after %d attempts (last: %v)", e.Key, e.Attempts, e.Last)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *RetriesExhaustedError) Is(target error) bool { return target == ErrConflict }

// UpdateResult reports what Update did.
type UpdateResult struct {
	Version  uint64 // the version written
	Value    []byte // the value written
	Attempts int    // 1 when the first attempt succeeded
}

// Update reads key, calls fn with its current value (exists false when
// absent) and writes fn's result if nobody wrote the key in between,
// retrying with jittered exponential backoff on conflicts up to
// MaxAttempts. fn must be free of side effects: it may run several times.
// An error from fn stops Update and is returned as is.
func Update(ctx context.Context, s RecordStore, key string, fn func(old []byte, exists bool) ([]byte, error), opts UpdateOptions) (UpdateResult, error) {
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = 10
	}
	if opts.BackoffMax <= 0 {
		opts.BackoffMax = max(200*time.Millisecond, opts.BackoffMin)
	}
	if opts.BackoffMin <= 0 {
		opts.BackoffMin = min(2*time.Millisecond, opts.BackoffMax)
	}
	opts.BackoffMax = max(opts.BackoffMax, opts.BackoffMin)
	var last *ConflictError
	bo := backoff.NewFull(opts.BackoffMin, opts.BackoffMax)
	for attempt := 1; attempt <= opts.MaxAttempts; attempt++ {
		cur, err := s.GetRecord(ctx, key)
		exists := err == nil
		if err != nil && !errors.Is(err, ErrNotFound) {
			return UpdateResult{Attempts: attempt}, err
		}
		next, err := fn(cur.Value, exists)
		if err != nil {
			return UpdateResult{Attempts: attempt}, err
		}
		v, err := s.PutRecord(ctx, key, next, cur.Version)
		if err == nil {
			return UpdateResult{Version: v, Value: next, Attempts: attempt}, nil
		}
		if !errors.As(err, &last) {
			return UpdateResult{Attempts: attempt}, err
		}
		if attempt == opts.MaxAttempts {
			break
		}
		if err := backoff.Sleep(ctx, bo.Next()); err != nil {
			return UpdateResult{Attempts: attempt}, err
		}
	}
	return UpdateResult{Attempts: opts.MaxAttempts}, &RetriesExhaustedError{Key: key, Attempts: opts.MaxAttempts, Last: last}
}

// RecordLocker is implemented by stores that can lock a record for the
// length of one engine transaction (PostgreSQL: SELECT ... FOR UPDATE with
// lock_timeout). It is the pessimistic alternative to retrying on
// conflicts.
type RecordLocker interface {
	// LockedTxn locks key (waiting at most wait for the lock; ErrLockTimeout
	// after that), reads it, calls fn with the record (exists false when
	// absent: the key is then not locked, so fn's Txn should condition on
	// absence), and applies the Txn fn returns — its conditions checked and
	// its writes applied in the same engine transaction, which then commits
	// and unlocks. An error from fn rolls back and is returned as is. fn
	// may be called more than once, each time with the record as locked
	// then (PostgreSQL: when the Txn touches keys that sort before key and
	// one of them is busy, the locks are let go and taken again in key
	// order, so that LockedTxn never deadlocks with Txn): it must be free
	// of side effects.
	LockedTxn(ctx context.Context, key string, wait time.Duration, fn func(cur Versioned, exists bool) (Txn, error)) (TxnResult, error)
}

// ErrLockTimeout reports that a record lock was not granted in time.
var ErrLockTimeout = errors.New("record lock not granted in time")
