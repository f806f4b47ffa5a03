package server

import (
	"encoding/binary"
	"errors"
	"io"
	"time"
)

// Log records. Each is a type byte followed by uvarint numbers and
// uvarint-length-prefixed strings. The same records make up snapshots.
const (
	recGrant        = 1 // token, ttl, logged ttl, acquired, name, owner, request id, session, data
	recRelease      = 2 // token, name (release, force, expiry)
	recTTL          = 3 // token, logged ttl, name (a renewal raised the TTL)
	recSessionOpen  = 4 // ttl, id
	recSessionClose = 5 // id
	recToken        = 6 // last token issued (snapshot header)
	recNop          = 7 // a barrier

	// Versioned records (engine_records.go).
	recRecords  = 8 // n, then n ops applied together: kind, key, version, value (puts only)
	recRecEpoch = 9 // the highest version ever deleted (snapshot header)
)

var errCorrupt = errors.New("corrupt log record")

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func encodeGrant(ent *engEntry) []byte {
	return appendGrant(make([]byte, 0, 48+len(ent.name)+len(ent.owner)+len(ent.reqID())+len(ent.data())), ent)
}

// appendGrant appends ent's grant record to b.
func appendGrant(b []byte, ent *engEntry) []byte {
	b = append(b, recGrant)
	b = binary.AppendUvarint(b, ent.token)
	b = binary.AppendUvarint(b, uint64(ent.ttl))
	b = binary.AppendUvarint(b, uint64(ent.loggedTTL))
	b = binary.AppendVarint(b, ent.acquired)
	b = appendString(b, ent.name)
	b = appendString(b, ent.owner)
	b = appendString(b, ent.reqID())
	sess := ""
	if s := ent.sess(); s != nil {
		sess = s.id
	}
	b = appendString(b, sess)
	data := ent.data()
	b = binary.AppendUvarint(b, uint64(len(data)))
	return append(b, data...)
}

func encodeRelease(ent *engEntry) []byte {
	return appendRelease(make([]byte, 0, 12+len(ent.name)), ent)
}

// appendRelease appends ent's release record to b.
func appendRelease(b []byte, ent *engEntry) []byte {
	b = append(b, recRelease)
	b = binary.AppendUvarint(b, ent.token)
	return appendString(b, ent.name)
}

// scratch returns e's buffer for encoding one record, emptied: the log
// copies what it is given, so the buffer is reused by the next record.
// Records larger than a few KiB do not keep it. e.mu held.
func (e *Engine) scratch() []byte {
	if cap(e.enc) > 4096 {
		e.enc = nil
	}
	return e.enc[:0]
}

func encodeTTL(ent *engEntry) []byte {
	b := make([]byte, 0, 20+len(ent.name))
	b = append(b, recTTL)
	b = binary.AppendUvarint(b, ent.token)
	b = binary.AppendUvarint(b, uint64(ent.loggedTTL))
	return appendString(b, ent.name)
}

func encodeSessionOpen(s *engSession) []byte {
	b := []byte{recSessionOpen}
	b = binary.AppendUvarint(b, uint64(s.ttl))
	return appendString(b, s.id)
}

func encodeSessionClose(id string) []byte { return appendString([]byte{recSessionClose}, id) }

func encodeToken(t uint64) []byte { return binary.AppendUvarint([]byte{recToken}, t) }

func encodeNop() []byte { return []byte{recNop} }

// reader decodes one record.
type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 { return readVarint(r, binary.Uvarint) }

func (r *reader) varint() int64 { return readVarint(r, binary.Varint) }

// readVarint decodes one varint with decode (binary.Uvarint or
// binary.Varint), or marks r corrupt.
func readVarint[T uint64 | int64](r *reader, decode func([]byte) (T, int)) T {
	if r.err != nil {
		return 0
	}
	v, n := decode(r.b)
	if n <= 0 {
		r.err = errCorrupt
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = errCorrupt
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) string() string { return string(r.bytes()) }

// maybeSnapshot starts a snapshot when the log has grown past
// SnapshotBytes, and writes it in the background. e.mu held.
func (e *Engine) maybeSnapshot() {
	if e.log == nil || e.snapping || e.logged <= e.cfg.SnapshotBytes {
		return
	}
	seq, buf, err := e.beginSnapshot()
	if err != nil {
		e.log_.Error("snapshot: rotate the log", "err", err)
		return
	}
	go e.writeSnapshot(seq, buf)
}

// beginSnapshot rotates the log and encodes the state under e.mu, so that
// the snapshot matches the log position of Rotate; writeSnapshot must
// follow. e.mu held.
func (e *Engine) beginSnapshot() (uint64, []byte, error) {
	seq, err := e.log.Rotate()
	if err != nil {
		return 0, nil, err
	}
	e.logged = 0
	buf := e.encodeState()
	e.snapping = true
	e.snapshots.Add(1)
	return seq, buf, nil
}

// writeSnapshot writes and syncs the snapshot begun by beginSnapshot; the
// segments it covers are deleted then. Called without e.mu.
func (e *Engine) writeSnapshot(seq uint64, buf []byte) error {
	defer e.snapshots.Done()
	start := time.Now()
	err := e.log.WriteSnapshot(seq, func(w io.Writer) error {
		_, err := w.Write(buf)
		return err
	})
	e.mu.Lock()
	e.snapping = false
	e.mu.Unlock()
	if err != nil {
		e.log_.Error("snapshot failed", "err", err)
		return err
	}
	e.log_.Info("snapshot written", "bytes", len(buf), "took", time.Since(start))
	return nil
}

// snapshotNow writes a snapshot at once and waits until it is durable (for
// tests). It fails if a snapshot is being written.
func (e *Engine) snapshotNow() error {
	e.lock()
	if e.log == nil || e.closed || e.snapping {
		e.unlock()
		return errors.New("snapshot: no log, engine closed, or a snapshot in progress")
	}
	seq, buf, err := e.beginSnapshot()
	e.unlock()
	if err != nil {
		return err
	}
	return e.writeSnapshot(seq, buf)
}

// encodeState encodes the last token, every session, every grant not
// freed, every tombstone (oldest first) and the records. e.mu held.
func (e *Engine) encodeState() []byte {
	var buf []byte
	put := func(rec []byte) {
		buf = binary.AppendUvarint(buf, uint64(len(rec)))
		buf = append(buf, rec...)
	}
	// The token record of a snapshot also says how many entries follow
	// (recovery sizes its map with it; older versions ignore it).
	put(binary.AppendUvarint(encodeToken(e.token), uint64(len(e.leases))))
	for _, s := range e.sessions {
		if !s.ended {
			put(encodeSessionOpen(s))
		}
	}
	for _, ent := range e.leases {
		if ent.held {
			put(encodeGrant(ent))
		}
	}
	e.encodeTombs(put)
	e.encodeRecords(put)
	return buf
}
