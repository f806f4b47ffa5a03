package server

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/server/wal"
	"github.com/leasehold/leasehold/storekit"
)

// Versioned records in the native engine (leasehold.RecordStore).
//
// Records live beside the leases under the same mutex and in the same
// log: every change is applied to memory under e.mu, appended to the log
// as one record (a transaction's writes together, so that recovery
// applies all or none of them) and acknowledged once it is durable.
//
// Versions count 1, 2, 3, ... per key. A key created after some record
// was deleted starts above every version ever deleted (the epoch), so a
// version is never reused for a key: a client holding a version from
// before a delete cannot overwrite the key's next life with it.
//
// Answers that report state (a read, a conflict) wait until the changes
// they may have observed are durable, so nobody is told of a version that
// a crash could take back.
//
// The records of all clients together take at most MaxRecordBytes (recSize
// each): a write that would take them past it (a put, an add that creates
// a key or lengthens its value, a transaction's writes together) is
// refused whole with a *QuotaError, changing nothing; a write that does
// not grow them (an update to a value no longer, a delete) always passes.
// The total is kept by applyRecOps, so recovery finds it again.

var _ leasehold.RecordStore = (*Engine)(nil)

// engRecords is the engine's record state; e.mu guards all but pending.
type engRecords struct {
	m     map[string]engRecord
	epoch uint64 // the highest version ever deleted: creations start above it
	bytes int64  // the recSize of every record, summed
	// pending counts logged record changes not yet durable.
	pending atomic.Int64
}

// engRecord is one record: 40 bytes in the map besides the key's and the
// value's bytes.
type engRecord struct {
	value   string
	version uint64
}

// QuotaRecords is the resource of the *QuotaError that refuses a record
// write past EngineConfig.MaxRecordBytes (serve's --max-record-bytes): a
// bound of the whole server, not of one client. Its Limit is the bound,
// its Have the bytes the records would take with the write.
const QuotaRecords = "records"

// recOverhead is what a record takes in memory besides its key's and
// value's bytes: its slot in the map (the key's string header and the
// 24-byte engRecord) with the map's spare room, and the rounding up of the
// strings' allocations. Measured as live heap after GC with
// runtime.ReadMemStats, 100,000 records with 12-byte keys made in a row:
// 67 bytes each with empty values, 73 with 10-byte values, 91 with
// 1,000-byte ones; under 96 too at the bound, where each new record
// follows the delete of the oldest.
const recOverhead = 96

// recSize is what a record counts against MaxRecordBytes.
func recSize(key, value string) int64 { return recOverhead + int64(len(key)+len(value)) }

// Kinds of record ops inside a recRecords record.
const (
	recOpPut    = 1
	recOpDelete = 2
)

// recOp is one change of a record, as logged.
type recOp struct {
	kind    byte
	key     string
	version uint64 // the new version (put) or the deleted one (delete)
	value   string
}

func (o recOp) size() int { return 1 + 2*binary.MaxVarintLen64 + len(o.key) + len(o.value) }

// maxRecLog is the most bytes one transaction's log record may take.
const maxRecLog = wal.MaxRecordSize - 64

func encodeRecOps(ops []recOp) []byte {
	n := 1 + binary.MaxVarintLen64
	for _, o := range ops {
		n += o.size()
	}
	b := make([]byte, 0, n)
	b = append(b, recRecords)
	b = binary.AppendUvarint(b, uint64(len(ops)))
	for _, o := range ops {
		b = append(b, o.kind)
		b = appendString(b, o.key)
		b = binary.AppendUvarint(b, o.version)
		if o.kind == recOpPut {
			b = appendString(b, o.value)
		}
	}
	return b
}

func encodeRecEpoch(epoch uint64) []byte { return binary.AppendUvarint([]byte{recRecEpoch}, epoch) }

// replayRecords applies a logged record change during recovery.
func (e *Engine) replayRecords(typ byte, r *reader) error {
	if e.recs.m == nil {
		e.recs.m = map[string]engRecord{}
	}
	switch typ {
	case recRecEpoch:
		ep := r.uvarint()
		if r.err != nil {
			return r.err
		}
		e.recs.epoch = max(e.recs.epoch, ep)
	case recRecords:
		n := r.uvarint()
		if r.err != nil {
			return r.err
		}
		if n > uint64(len(r.b)) {
			return errCorrupt
		}
		ops := make([]recOp, 0, n)
		for range n {
			var o recOp
			if len(r.b) == 0 {
				return errCorrupt
			}
			o.kind = r.b[0]
			r.b = r.b[1:]
			o.key = r.string()
			o.version = r.uvarint()
			switch o.kind {
			case recOpPut:
				o.value = r.string()
			case recOpDelete:
			default:
				return fmt.Errorf("%w: unknown record op %d", errCorrupt, o.kind)
			}
			if r.err != nil {
				return r.err
			}
			ops = append(ops, o)
		}
		e.applyRecOps(ops) // all or nothing: decoded in full first
	default:
		return fmt.Errorf("%w: unknown type %d", errCorrupt, typ)
	}
	return nil
}

// applyRecOps changes the records in memory. e.mu held (or recovering).
func (e *Engine) applyRecOps(ops []recOp) {
	if e.recs.m == nil {
		e.recs.m = map[string]engRecord{}
	}
	for _, o := range ops {
		if cur, ok := e.recs.m[o.key]; ok {
			e.recs.bytes -= recSize(o.key, cur.value)
		}
		switch o.kind {
		case recOpPut:
			e.recs.m[o.key] = engRecord{value: o.value, version: o.version}
			e.recs.bytes += recSize(o.key, o.value)
		case recOpDelete:
			delete(e.recs.m, o.key)
			e.recs.epoch = max(e.recs.epoch, o.version)
		}
	}
}

// recRoom refuses ops (each of a different key) with a *QuotaError when
// they would take the records past MaxRecordBytes; ops that do not grow
// the records always pass. e.mu held.
func (e *Engine) recRoom(ops []recOp) error {
	var grow int64
	for _, o := range ops {
		if cur, ok := e.recs.m[o.key]; ok {
			grow -= recSize(o.key, cur.value)
		}
		if o.kind == recOpPut {
			grow += recSize(o.key, o.value)
		}
	}
	if grow <= 0 || e.recs.bytes+grow <= e.cfg.MaxRecordBytes {
		return nil
	}
	return &QuotaError{Resource: QuotaRecords, Limit: e.cfg.MaxRecordBytes, Have: e.recs.bytes + grow}
}

// recWrite logs ops, one write's, if recRoom lets them in, and calls done
// once they are durable. e.mu held; it unlocks.
func (e *Engine) recWrite(ops []recOp, done func(error)) error {
	if err := e.recRoom(ops); err != nil {
		e.unlock()
		return err
	}
	e.recLog(ops, done)
	e.unlock()
	return nil
}

// encodeRecords adds the record state to a snapshot. e.mu held.
func (e *Engine) encodeRecords(put func([]byte)) {
	put(encodeRecEpoch(e.recs.epoch))
	var buf []byte
	for k, r := range e.recs.m {
		buf = encodeRecOpsInto(buf[:0], recOp{kind: recOpPut, key: k, version: r.version, value: r.value})
		put(buf)
	}
}

func encodeRecOpsInto(b []byte, o recOp) []byte {
	b = append(b, recRecords, 1, o.kind)
	b = appendString(b, o.key)
	b = binary.AppendUvarint(b, o.version)
	return appendString(b, o.value)
}

// nextVersion is the version a write of key gives it. e.mu held.
func (e *Engine) nextVersion(cur engRecord, exists bool) uint64 {
	if exists {
		return cur.version + 1
	}
	return e.recs.epoch + 1
}

// recLog applies ops, logs them and calls done once they are durable.
// e.mu held.
func (e *Engine) recLog(ops []recOp, done func(error)) {
	e.applyRecOps(ops)
	e.recs.pending.Add(1)
	e.commit(nil, encodeRecOps(ops), func(err error) {
		e.recs.pending.Add(-1)
		done(err)
	})
}

// recBarrier calls done once every record change logged so far is durable
// (at once when none is pending). e.mu held.
func (e *Engine) recBarrier(done func(error)) {
	var rec []byte
	if e.recs.pending.Load() > 0 {
		rec = encodeNop()
	}
	e.commit(nil, rec, done)
}

// recAnswer waits for ch (a barrier or a commit) and returns err then, or
// the barrier's failure.
func recAnswer(ch chan error, err error) error {
	if werr := <-ch; werr != nil {
		return fmt.Errorf("persist records: %w", werr)
	}
	return err
}

// GetRecord implements leasehold.RecordStore.
func (e *Engine) GetRecord(ctx context.Context, key string) (leasehold.Versioned, error) {
	if err := e.lockOpen(storekit.ValidateKey(key), ctx.Err()); err != nil {
		return leasehold.Versioned{}, err
	}
	ch := make(chan error, 1)
	cur, ok := e.recs.m[key]
	e.recBarrier(func(err error) { ch <- err })
	e.unlock()
	if !ok {
		return leasehold.Versioned{}, recAnswer(ch, leasehold.ErrNotFound)
	}
	if err := recAnswer(ch, nil); err != nil {
		return leasehold.Versioned{}, err
	}
	return leasehold.Versioned{Key: key, Value: []byte(cur.value), Version: cur.version}, nil
}

// PutRecord implements leasehold.RecordStore.
func (e *Engine) PutRecord(ctx context.Context, key string, value []byte, expect uint64) (uint64, error) {
	if err := e.lockOpen(storekit.ValidateKey(key), storekit.ValidateValue(value), ctx.Err()); err != nil {
		return 0, err
	}
	ch := make(chan error, 1)
	done := func(err error) { ch <- err }
	cur, ok := e.recs.m[key]
	if cur.version != expect {
		e.recBarrier(done)
		e.unlock()
		return 0, recAnswer(ch, &leasehold.ConflictError{Key: key, Expected: expect, Actual: cur.version})
	}
	v := e.nextVersion(cur, ok)
	if err := e.recWrite([]recOp{{kind: recOpPut, key: key, version: v, value: string(value)}}, done); err != nil {
		return 0, err
	}
	if err := recAnswer(ch, nil); err != nil {
		return 0, err
	}
	return v, nil
}

// DeleteRecord implements leasehold.RecordStore.
func (e *Engine) DeleteRecord(ctx context.Context, key string, expect uint64) error {
	if err := e.lockOpen(storekit.ValidateKey(key), ctx.Err()); err != nil {
		return err
	}
	ch := make(chan error, 1)
	done := func(err error) { ch <- err }
	cur, ok := e.recs.m[key]
	switch {
	case !ok:
		e.recBarrier(done)
		e.unlock()
		return recAnswer(ch, leasehold.ErrNotFound)
	case cur.version != expect:
		e.recBarrier(done)
		e.unlock()
		return recAnswer(ch, &leasehold.ConflictError{Key: key, Expected: expect, Actual: cur.version})
	}
	e.recLog([]recOp{{kind: recOpDelete, key: key, version: cur.version}}, done)
	e.unlock()
	return recAnswer(ch, nil)
}

// AddCounter implements leasehold.RecordStore.
func (e *Engine) AddCounter(ctx context.Context, key string, delta int64) (int64, uint64, error) {
	if err := e.lockOpen(storekit.ValidateKey(key), ctx.Err()); err != nil {
		return 0, 0, err
	}
	ch := make(chan error, 1)
	op, n, err := e.addOp(key, delta)
	if err != nil {
		e.unlock()
		return 0, 0, err
	}
	if err := e.recWrite([]recOp{op}, func(err error) { ch <- err }); err != nil {
		return 0, 0, err
	}
	if err := recAnswer(ch, nil); err != nil {
		return 0, 0, err
	}
	return n, op.version, nil
}

// addOp computes the write that adds delta to the counter at key. e.mu
// held.
func (e *Engine) addOp(key string, delta int64) (recOp, int64, error) {
	cur, ok := e.recs.m[key]
	var n int64
	if ok {
		var err error
		if n, err = storekit.ParseCounter(key, []byte(cur.value)); err != nil {
			return recOp{}, 0, err
		}
	}
	n, err := storekit.AddInt64(key, n, delta)
	if err != nil {
		return recOp{}, 0, err
	}
	return recOp{kind: recOpPut, key: key, version: e.nextVersion(cur, ok), value: strconv.FormatInt(n, 10)}, n, nil
}

// Txn implements leasehold.RecordStore: the conditions are checked and the
// writes applied under the engine's lock, and logged as one record.
func (e *Engine) Txn(ctx context.Context, txn leasehold.Txn) (leasehold.TxnResult, error) {
	if err := e.lockOpen(txn.Validate(), ctx.Err()); err != nil {
		return leasehold.TxnResult{}, err
	}
	ch := make(chan error, 1)
	done := func(err error) { ch <- err }
	for _, c := range txn.If {
		if cur := e.recs.m[c.Key]; cur.version != c.Version {
			e.recBarrier(done)
			e.unlock()
			return leasehold.TxnResult{}, recAnswer(ch, &leasehold.ConflictError{Key: c.Key, Expected: c.Version, Actual: cur.version})
		}
	}
	// Compute every write before changing anything: a failing add leaves
	// all records as they were. Keys are written at most once, so no
	// write depends on another.
	res := leasehold.TxnResult{Versions: make(map[string]uint64, len(txn.Then))}
	ops := make([]recOp, 0, len(txn.Then))
	size := 16
	for _, w := range txn.Then {
		cur, ok := e.recs.m[w.Key]
		var op recOp
		switch {
		case w.Delete:
			res.Versions[w.Key] = 0
			if !ok {
				continue // deleting an absent key is a no-op
			}
			op = recOp{kind: recOpDelete, key: w.Key, version: cur.version}
		case w.Add != 0 && w.Value == nil:
			var err error
			if op, _, err = e.addOp(w.Key, w.Add); err != nil {
				e.unlock()
				return leasehold.TxnResult{}, err
			}
			res.Versions[w.Key] = op.version
		default:
			op = recOp{kind: recOpPut, key: w.Key, version: e.nextVersion(cur, ok), value: string(w.Value)}
			res.Versions[w.Key] = op.version
		}
		size += op.size()
		ops = append(ops, op)
	}
	if size > maxRecLog {
		e.unlock()
		return leasehold.TxnResult{}, &leasehold.InvalidError{Field: "txn",
			Reason: fmt.Sprintf("its writes take about %d bytes, more than the limit of %d for one transaction", size, maxRecLog)}
	}
	if len(ops) == 0 {
		e.recBarrier(done) // only deletes of absent keys
		e.unlock()
	} else if err := e.recWrite(ops, done); err != nil {
		return leasehold.TxnResult{}, err
	}
	if err := recAnswer(ch, nil); err != nil {
		return leasehold.TxnResult{}, err
	}
	return res, nil
}

// recordCount is the number of records. e.mu held.
func (e *Engine) recordCount() int { return len(e.recs.m) }
