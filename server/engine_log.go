package server

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/leasehold/leasehold/internal/mutation"
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
	return appendGrant(make([]byte, 0, 48+len(ent.name)+len(ent.owner)+len(ent.reqID)+len(ent.data)), ent)
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
	b = appendString(b, ent.reqID)
	sess := ""
	if ent.sess != nil {
		sess = ent.sess.id
	}
	b = appendString(b, sess)
	b = binary.AppendUvarint(b, uint64(len(ent.data)))
	return append(b, ent.data...)
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

// recovery rebuilds the engine's state from a snapshot and the log.
type recovery struct {
	e        *Engine
	sessions map[string]time.Duration
	// freed lists the entries whose release (or expiry) was replayed, in
	// replay order: they become tombstones in that order.
	freed []*engEntry
}

func newRecovery(e *Engine) *recovery {
	return &recovery{e: e, sessions: map[string]time.Duration{}}
}

func (rc *recovery) load(r io.Reader) error {
	br := bufio.NewReaderSize(r, 1<<20)
	buf := make([]byte, 0, 4096)
	for {
		n, err := binary.ReadUvarint(br)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("snapshot: %w", err)
		}
		if n > 1<<24 {
			return fmt.Errorf("snapshot: %w", errCorrupt)
		}
		buf = buf[:0]
		buf = append(buf, make([]byte, n)...)
		if _, err := io.ReadFull(br, buf); err != nil {
			return fmt.Errorf("snapshot: %w", err)
		}
		if err := rc.apply(buf); err != nil {
			return fmt.Errorf("snapshot: %w", err)
		}
	}
}

// apply replays one record. Strings are copied out of rec.
func (rc *recovery) apply(rec []byte) error {
	if len(rec) == 0 {
		return errCorrupt
	}
	e := rc.e
	r := &reader{b: rec[1:]}
	switch rec[0] {
	case recGrant:
		token := r.uvarint()
		ttl := time.Duration(r.uvarint())
		logged := time.Duration(r.uvarint())
		acquired := r.varint()
		name, owner, reqID, sess := r.string(), r.string(), r.string(), r.string()
		data := r.bytes()
		if r.err != nil {
			return r.err
		}
		ent := e.leases[name]
		if ent == nil {
			ent = &engEntry{name: name}
			ent.dl.ent = ent
			ent.dl.idx = -1
			e.leases[name] = ent
		}
		ent.owner, ent.reqID, ent.token, ent.ttl, ent.loggedTTL, ent.acquired = owner, reqID, token, ttl, logged, acquired
		ent.data = string(data)
		ent.held = true
		ent.sess = nil
		if sess != "" {
			ent.sess = &engSession{id: sess} // resolved in finish
		}
		if !mutation.On("token-reuse") {
			e.token = max(e.token, token)
		}
	case recRelease:
		token := r.uvarint()
		name := r.string()
		if r.err != nil {
			return r.err
		}
		if ent := e.leases[name]; ent != nil && ent.token == token {
			ent.held = false
			ent.sess = nil
			rc.freed = append(rc.freed, ent)
		}
	case recTTL:
		token := r.uvarint()
		logged := time.Duration(r.uvarint())
		name := r.string()
		if r.err != nil {
			return r.err
		}
		if ent := e.leases[name]; ent != nil && ent.token == token {
			ent.loggedTTL = max(ent.loggedTTL, logged)
		}
	case recSessionOpen:
		ttl := time.Duration(r.uvarint())
		id := r.string()
		if r.err != nil {
			return r.err
		}
		rc.sessions[id] = ttl
	case recSessionClose:
		id := r.string()
		if r.err != nil {
			return r.err
		}
		delete(rc.sessions, id)
	case recToken:
		t := r.uvarint()
		if r.err != nil {
			return r.err
		}
		e.token = max(e.token, t)
	case recNop:
	case recRecords, recRecEpoch:
		return e.replayRecords(rec[0], r)
	default:
		return fmt.Errorf("%w: unknown type %d", errCorrupt, rec[0])
	}
	return nil
}

// finish gives every recovered lease and session its full TTL from now:
// no holder's own deadline can be later than that. Grants freed before the
// restart (in the snapshot's tombstones or the log) become tombstones again,
// in the order they were freed, each with a full TombstoneTTL from now, so
// their holders may repeat the release and still get nil (the Store
// contract).
func (rc *recovery) finish() {
	e := rc.e
	now := e.now()
	for id, ttl := range rc.sessions {
		s := e.newSession(id, ttl)
		e.dl.set(&s.dl, now+int64(ttl))
	}
	for _, ent := range e.leases {
		if !ent.held {
			continue
		}
		if ent.sess != nil {
			s := e.sessions[ent.sess.id]
			ent.sess = nil
			if s == nil { // its session ended without the release logged
				ent.held = false
				rc.freed = append(rc.freed, ent)
				continue
			}
			e.attach(ent, s)
		} else {
			e.dl.set(&ent.dl, now+int64(max(ent.loggedTTL, ent.ttl)))
		}
		e.held++
	}
	// A name freed several times takes the place of its last release.
	last := make(map[*engEntry]int, len(rc.freed))
	for i, ent := range rc.freed {
		last[ent] = i
	}
	for i, ent := range rc.freed {
		if last[ent] == i && !ent.held && e.leases[ent.name] == ent {
			e.tomb(ent, now)
		}
	}
	rc.freed = nil
	for name, ent := range e.leases {
		if !ent.held && !ent.tomb { // forgotten already (MaxTombstones, MaxTombstoneBytes)
			delete(e.leases, name)
		}
	}
}

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
	put(encodeToken(e.token))
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
