package memory

import (
	"context"
	"strconv"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storekit"
)

var _ leasehold.RecordStore = (*Store)(nil)

// Versioned records live in a map of their own, apart from the leases, under
// the store's one mutex. Versions come from one counter for the whole store,
// so they increase with every write of a key, also across its deletion,
// without keeping deleted keys.

type record struct {
	value   []byte
	version uint64
}

// recordState is the records part of a Store.
type recordState struct {
	records map[string]record
	seq     uint64 // the last version given out
}

// lockRecords locks the store for a record operation, as lock does.
func (s *Store) lockRecords(ctx context.Context) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	if s.recs.records == nil {
		s.recs.records = map[string]record{}
	}
	return nil
}

func (s *Store) nextVersion() uint64 {
	s.recs.seq++
	return s.recs.seq
}

func conflict(key string, expected uint64, cur record, exists bool) error {
	e := &leasehold.ConflictError{Key: key, Expected: expected}
	if exists {
		e.Actual = cur.version
	}
	return e
}

// GetRecord implements leasehold.RecordStore.
func (s *Store) GetRecord(ctx context.Context, key string) (leasehold.Versioned, error) {
	if err := storekit.ValidateKey(key); err != nil {
		return leasehold.Versioned{}, err
	}
	if err := s.lockRecords(ctx); err != nil {
		return leasehold.Versioned{}, err
	}
	defer s.mu.Unlock()
	r, ok := s.recs.records[key]
	if !ok {
		return leasehold.Versioned{}, leasehold.ErrNotFound
	}
	return leasehold.Versioned{Key: key, Value: cloneValue(r.value), Version: r.version}, nil
}

// PutRecord implements leasehold.RecordStore.
func (s *Store) PutRecord(ctx context.Context, key string, value []byte, expect uint64) (uint64, error) {
	if err := storekit.ValidatePut(key, value); err != nil {
		return 0, err
	}
	value = cloneValue(value)
	if err := s.lockRecords(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	cur, ok := s.recs.records[key]
	if (expect == 0 && ok) || (expect != 0 && (!ok || cur.version != expect)) {
		return 0, conflict(key, expect, cur, ok)
	}
	v := s.nextVersion()
	s.recs.records[key] = record{value: value, version: v}
	return v, nil
}

// DeleteRecord implements leasehold.RecordStore.
func (s *Store) DeleteRecord(ctx context.Context, key string, expect uint64) error {
	if err := storekit.ValidateKey(key); err != nil {
		return err
	}
	if err := s.lockRecords(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	cur, ok := s.recs.records[key]
	if !ok {
		return leasehold.ErrNotFound
	}
	if cur.version != expect {
		return conflict(key, expect, cur, true)
	}
	delete(s.recs.records, key)
	s.nextVersion() // the delete is a write: no later version may equal an earlier one
	return nil
}

// AddCounter implements leasehold.RecordStore.
func (s *Store) AddCounter(ctx context.Context, key string, delta int64) (int64, uint64, error) {
	if err := storekit.ValidateKey(key); err != nil {
		return 0, 0, err
	}
	if err := s.lockRecords(ctx); err != nil {
		return 0, 0, err
	}
	defer s.mu.Unlock()
	n, err := s.added(key, delta)
	if err != nil {
		return 0, 0, err
	}
	v := s.nextVersion()
	s.recs.records[key] = record{value: counterValue(n), version: v}
	return n, v, nil
}

// added is the counter at key plus delta, without writing it.
func (s *Store) added(key string, delta int64) (int64, error) {
	n := int64(0)
	if cur, ok := s.recs.records[key]; ok {
		var err error
		if n, err = storekit.ParseCounter(key, cur.value); err != nil {
			return 0, err
		}
	}
	return storekit.AddInt64(key, n, delta)
}

// Txn implements leasehold.RecordStore: under the store's mutex it checks
// every condition, computes every write (so that a bad add fails before
// anything changes), then applies them.
func (s *Store) Txn(ctx context.Context, txn leasehold.Txn) (leasehold.TxnResult, error) {
	if err := txn.Validate(); err != nil {
		return leasehold.TxnResult{}, err
	}
	if err := s.lockRecords(ctx); err != nil {
		return leasehold.TxnResult{}, err
	}
	defer s.mu.Unlock()
	for _, c := range txn.If {
		cur, ok := s.recs.records[c.Key]
		if (c.Version == 0 && ok) || (c.Version != 0 && (!ok || cur.version != c.Version)) {
			return leasehold.TxnResult{}, conflict(c.Key, c.Version, cur, ok)
		}
	}
	type change struct {
		key    string
		value  []byte
		delete bool
	}
	changes := make([]change, 0, len(txn.Then))
	for _, w := range txn.Then {
		switch {
		case w.Delete:
			changes = append(changes, change{key: w.Key, delete: true})
		case w.Add != 0 && w.Value == nil:
			n, err := s.added(w.Key, w.Add)
			if err != nil {
				return leasehold.TxnResult{}, err
			}
			changes = append(changes, change{key: w.Key, value: counterValue(n)})
		default:
			changes = append(changes, change{key: w.Key, value: cloneValue(w.Value)})
		}
	}
	res := leasehold.TxnResult{Versions: make(map[string]uint64, len(changes))}
	for _, c := range changes {
		if c.delete {
			if _, ok := s.recs.records[c.key]; ok {
				delete(s.recs.records, c.key)
				s.nextVersion()
			}
			res.Versions[c.key] = 0
			continue
		}
		v := s.nextVersion()
		s.recs.records[c.key] = record{value: c.value, version: v}
		res.Versions[c.key] = v
	}
	return res, nil
}

func counterValue(n int64) []byte { return strconv.AppendInt(nil, n, 10) }

func cloneValue(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return append([]byte{}, b...)
}
