package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storekit"
)

// Records (leasehold.RecordStore). A record is a hash under the store's
// prefix, apart from the lease keys:
//
//	<prefix>rec:<key>   v = the value, n = the version
//
// The key is used as it is, braces included, so that on Redis Cluster a
// caller decides the hash slot with a hash tag: keys that a Txn touches
// together must share one ("order:{42}", "balance:{42}"); a Txn whose keys
// lie in different slots is an *leasehold.InvalidError. On a single server
// (or Sentinel) any keys go together.
//
// GetRecord is one HMGET; PutRecord, DeleteRecord, AddCounter and Txn are
// one Lua function each (lua.go), which checks versions and writes atomically.
// Versions are above the previous version of the key and at least the
// server clock (TIME) in microseconds, so they are never reused, even when
// a key is deleted and created again.
//
// Records are only as durable as Redis's persistence settings: a restart
// without persistence, or a failover to a replica that missed writes,
// loses the records (or their latest writes). Unlike leases, nothing holds
// back after such a restart; a client that still holds a version from
// before it gets a conflict, because new versions are above old ones, but a
// create (expected version 0) of a lost record succeeds.
var _ leasehold.RecordStore = (*Store)(nil)

// recordKey is the Redis key of a record.
func (s *Store) recordKey(key string) string { return s.prefix + "rec:" + key }

// GetRecord implements leasehold.RecordStore with one HMGET.
func (s *Store) GetRecord(ctx context.Context, key string) (leasehold.Versioned, error) {
	if err := storekit.ValidateKey(key); err != nil {
		return leasehold.Versioned{}, err
	}
	if err := s.usable(ctx); err != nil {
		return leasehold.Versioned{}, err
	}
	res, err := s.rdb.HMGet(ctx, s.recordKey(key), "v", "n").Result()
	if err != nil {
		return leasehold.Versioned{}, s.translate(ctx, "get record", err)
	}
	v, ok1 := res[0].(string)
	n, ok2 := res[1].(string)
	if !ok1 || !ok2 {
		return leasehold.Versioned{}, leasehold.ErrNotFound
	}
	ver, err := parseVersion(n)
	if err != nil {
		return leasehold.Versioned{}, err
	}
	return leasehold.Versioned{Key: key, Value: []byte(v), Version: ver}, nil
}

// PutRecord implements leasehold.RecordStore with one script.
func (s *Store) PutRecord(ctx context.Context, key string, value []byte, expect uint64) (uint64, error) {
	if err := storekit.ValidatePut(key, value); err != nil {
		return 0, err
	}
	if err := s.usable(ctx); err != nil {
		return 0, err
	}
	res, err := s.run(ctx, lua.recPut, []string{s.recordKey(key)}, bytesArg(value), strconv.FormatUint(expect, 10)).Slice()
	if err != nil {
		return 0, s.translate(ctx, "put record", err)
	}
	code, _ := toInt(res[0])
	if len(res) != 2 {
		return 0, fmt.Errorf("redis put record: unexpected reply %v", res)
	}
	ver, err := parseVersion(res[1])
	if err != nil {
		return 0, err
	}
	if code != 1 {
		return 0, &leasehold.ConflictError{Key: key, Expected: expect, Actual: ver}
	}
	return ver, nil
}

// DeleteRecord implements leasehold.RecordStore with one script.
func (s *Store) DeleteRecord(ctx context.Context, key string, expect uint64) error {
	if err := storekit.ValidateKey(key); err != nil {
		return err
	}
	if err := s.usable(ctx); err != nil {
		return err
	}
	res, err := s.run(ctx, lua.recDelete, []string{s.recordKey(key)}, strconv.FormatUint(expect, 10)).Slice()
	if err != nil {
		return s.translate(ctx, "delete record", err)
	}
	switch code, _ := toInt(res[0]); {
	case code == 1:
		return nil
	case code == 2:
		return leasehold.ErrNotFound
	case code == 0 && len(res) == 2:
		ver, err := parseVersion(res[1])
		if err != nil {
			return err
		}
		return &leasehold.ConflictError{Key: key, Expected: expect, Actual: ver}
	}
	return fmt.Errorf("redis delete record: unexpected reply %v", res)
}

// AddCounter implements leasehold.RecordStore with one script (HINCRBY,
// which is exact over int64 and refuses overflow).
func (s *Store) AddCounter(ctx context.Context, key string, delta int64) (int64, uint64, error) {
	if err := storekit.ValidateKey(key); err != nil {
		return 0, 0, err
	}
	if err := s.usable(ctx); err != nil {
		return 0, 0, err
	}
	res, err := s.run(ctx, lua.recAdd, []string{s.recordKey(key)}, strconv.FormatInt(delta, 10)).Slice()
	if err != nil {
		return 0, 0, s.translate(ctx, "add to counter", err)
	}
	switch code, _ := toInt(res[0]); {
	case code == 1 && len(res) == 3:
		ver, err := parseVersion(res[2])
		if err != nil {
			return 0, 0, err
		}
		str, _ := res[1].(string)
		n, err := storekit.ParseCounter(key, []byte(str))
		if err != nil {
			return 0, 0, err
		}
		return n, ver, nil
	case (code == 2 || code == 3) && len(res) == 2:
		return 0, 0, addError(key, res[1], delta)
	}
	return 0, 0, fmt.Errorf("redis add to counter: unexpected reply %v", res)
}

// addError builds the *leasehold.InvalidError of an add that the script
// refused (not a counter, or overflow), from the value it found.
func addError(key string, found any, delta int64) error {
	str, _ := found.(string)
	n, err := storekit.ParseCounter(key, []byte(str))
	if err != nil {
		return err
	}
	if _, err := storekit.AddInt64(key, n, delta); err != nil {
		return err
	}
	return fmt.Errorf("redis add to counter %q: refused by the server (value %q, delta %d)", key, str, delta)
}

// Txn implements leasehold.RecordStore with one script over all the keys
// of the transaction. On Redis Cluster those keys must lie in one hash
// slot (use a hash tag); otherwise Txn returns an *leasehold.InvalidError
// and sends nothing.
func (s *Store) Txn(ctx context.Context, txn leasehold.Txn) (leasehold.TxnResult, error) {
	if err := txn.Validate(); err != nil {
		return leasehold.TxnResult{}, err
	}
	if err := s.usable(ctx); err != nil {
		return leasehold.TxnResult{}, err
	}
	var keys []string
	index := map[string]int{}
	idx := func(key string) string {
		i, ok := index[key]
		if !ok {
			keys = append(keys, s.recordKey(key))
			i = len(keys)
			index[key] = i
		}
		return strconv.Itoa(i)
	}
	args := make([]any, 0, 2+2*len(txn.If)+3*len(txn.Then))
	args = append(args, len(txn.If))
	for _, c := range txn.If {
		args = append(args, idx(c.Key), strconv.FormatUint(c.Version, 10))
	}
	args = append(args, len(txn.Then))
	for _, w := range txn.Then {
		switch {
		case w.Delete:
			args = append(args, idx(w.Key), "d", "")
		case w.Add != 0:
			args = append(args, idx(w.Key), "a", strconv.FormatInt(w.Add, 10))
		default:
			args = append(args, idx(w.Key), "s", bytesArg(w.Value))
		}
	}
	if s.cluster {
		if err := sameSlot(keys, txn); err != nil {
			return leasehold.TxnResult{}, err
		}
	}
	res, err := s.run(ctx, lua.recTxn, keys, args...).Slice()
	if err != nil {
		return leasehold.TxnResult{}, s.translate(ctx, "txn", err)
	}
	code, _ := toInt(res[0])
	switch {
	case code == 1 && len(res) == len(txn.Then)+1:
		out := leasehold.TxnResult{Versions: make(map[string]uint64, len(txn.Then))}
		for i, w := range txn.Then {
			ver, err := parseVersion(res[i+1])
			if err != nil {
				return leasehold.TxnResult{}, err
			}
			out.Versions[w.Key] = ver
		}
		return out, nil
	case code == 0 && len(res) == 3:
		i, _ := toInt(res[1])
		ver, err := parseVersion(res[2])
		if err != nil || i < 1 || int(i) > len(txn.If) {
			break
		}
		c := txn.If[i-1]
		return leasehold.TxnResult{}, &leasehold.ConflictError{Key: c.Key, Expected: c.Version, Actual: ver}
	case (code == 2 || code == 3) && len(res) == 3:
		i, _ := toInt(res[1])
		if i < 1 || int(i) > len(txn.Then) {
			break
		}
		w := txn.Then[i-1]
		return leasehold.TxnResult{}, addError(w.Key, res[2], w.Add)
	}
	return leasehold.TxnResult{}, fmt.Errorf("redis txn: unexpected reply %v", res)
}

// sameSlot checks that the Redis keys of a transaction share a hash slot.
func sameSlot(keys []string, txn leasehold.Txn) error {
	first := slot(keys[0])
	for _, k := range keys[1:] {
		if slot(k) != first {
			var names []string
			for _, c := range txn.If {
				names = append(names, c.Key)
			}
			for _, w := range txn.Then {
				names = append(names, w.Key)
			}
			return &leasehold.InvalidError{Field: "txn", Reason: fmt.Sprintf(
				"on Redis Cluster the keys of a transaction must share a hash slot: give them one hash tag, as in \"order:{42}\" and \"balance:{42}\" (keys: %q)",
				uniq(names))}
		}
	}
	return nil
}

func uniq(in []string) []string {
	seen := map[string]bool{}
	out := in[:0]
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// slot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of its hash
// tag (the bytes between the first '{' and the next '}', if not empty),
// else of the whole key, modulo 16384.
func slot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}

// bytesArg passes a value to a script as it is (an empty value as "").
func bytesArg(v []byte) any {
	if len(v) == 0 {
		return ""
	}
	return v
}

var errBadVersion = errors.New("redis: a record holds a version this version of leasehold cannot read")

func parseVersion(v any) (uint64, error) {
	switch x := v.(type) {
	case string:
		n, err := strconv.ParseUint(x, 10, 64)
		if err == nil {
			return n, nil
		}
	case int64:
		if x >= 0 {
			return uint64(x), nil
		}
	}
	return 0, fmt.Errorf("%w: %v", errBadVersion, v)
}
