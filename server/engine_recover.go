package server

// The engine (engine.go). Recovery: rebuilding the state from the newest
// snapshot and the log after it (engine_log.go has the records).
//
// Ten million held leases are ten million grant records to replay, so
// this is written for speed: a record's strings are looked up without
// copying them (only a new entry's name and an owner not seen lately are
// copied out), the lease map is sized from the count that a snapshot's
// token record carries, a snapshot's grants are put in the map without
// looking their names up first (a snapshot holds each name once: a
// duplicate is noticed by the map's size and handled as in the log),
// finish walks the entries in the order they were made (which is the
// order of their memory) rather than the map's, and the expiry heap is
// built in one pass rather than one push per lease.

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"time"

	"github.com/leasehold/leasehold/internal/mutation"
)

// recovery rebuilds the engine's state from a snapshot and the log.
type recovery struct {
	e        *Engine
	sessions map[string]time.Duration
	// freed lists the entries whose release (or expiry) was replayed, in
	// replay order: they become tombstones in that order.
	freed []*engEntry
	// ents lists the entries made, in the order they were made: e.leases
	// holds each of them, unless dupe.
	ents []*engEntry
	// dupe: a snapshot named an entry twice, so some of ents may have
	// been replaced in e.leases (finish then walks e.leases).
	dupe bool
	// inSnap: load is reading a snapshot. last is the entry of the grant
	// just read, which the tombstone's release that follows it names.
	inSnap bool
	last   *engEntry
}

func newRecovery(e *Engine) *recovery {
	return &recovery{e: e, sessions: map[string]time.Duration{}}
}

func (rc *recovery) load(r io.Reader) error {
	rc.inSnap = true
	defer func() { rc.inSnap, rc.last = false, nil }()
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
		var rec []byte
		if b, err := br.Peek(int(n)); err == nil {
			rec = b // in the reader's buffer: apply copies what it keeps
			_, _ = br.Discard(int(n))
		} else {
			buf = buf[:0]
			buf = append(buf, make([]byte, n)...)
			if _, err := io.ReadFull(br, buf); err != nil {
				return fmt.Errorf("snapshot: %w", err)
			}
			rec = buf
		}
		if err := rc.apply(rec); err != nil {
			return fmt.Errorf("snapshot: %w", err)
		}
	}
}

// apply replays one record. What it keeps of rec is copied out of it.
func (rc *recovery) apply(rec []byte) error {
	if len(rec) == 0 {
		return errCorrupt
	}
	e := rc.e
	r := reader{b: rec[1:]}
	switch rec[0] {
	case recGrant:
		token := r.uvarint()
		ttl := time.Duration(r.uvarint())
		logged := time.Duration(r.uvarint())
		acquired := r.varint()
		name, owner, reqID, sess := r.bytes(), r.bytes(), r.bytes(), r.bytes()
		data := r.bytes()
		if r.err != nil {
			return r.err
		}
		var ent *engEntry
		if rc.inSnap {
			ent = newEntry(string(name))
			n := len(e.leases)
			e.leases[ent.name] = ent
			rc.dupe = rc.dupe || len(e.leases) == n
			rc.ents = append(rc.ents, ent)
			rc.last = ent
		} else if ent = e.leases[string(name)]; ent == nil {
			ent = newEntry(string(name))
			e.leases[ent.name] = ent
			rc.ents = append(rc.ents, ent)
		}
		ent.owner = e.owners.internBytes(owner)
		ent.token, ent.ttl, ent.loggedTTL, ent.acquired = token, ttl, logged, acquired
		ent.setGrantFields(string(reqID), string(data))
		ent.held = true
		ent.setSess(nil)
		if len(sess) > 0 {
			ent.setSess(&engSession{id: string(sess)}) // resolved in finish
		}
		if !mutation.On("token-reuse") {
			e.token = max(e.token, token)
		}
	case recRelease:
		token := r.uvarint()
		name := r.bytes()
		if r.err != nil {
			return r.err
		}
		ent := rc.last
		if ent == nil || ent.name != string(name) {
			ent = e.leases[string(name)]
		}
		if ent != nil && ent.token == token {
			ent.held = false
			ent.setSess(nil)
			rc.freed = append(rc.freed, ent)
		}
	case recTTL:
		token := r.uvarint()
		logged := time.Duration(r.uvarint())
		name := r.bytes()
		if r.err != nil {
			return r.err
		}
		if ent := e.leases[string(name)]; ent != nil && ent.token == token {
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
		// A snapshot's token record goes on with the number of entries it
		// holds (held and tombstones): room for them is made at once.
		// Older snapshots end the record after the token.
		if len(r.b) > 0 {
			n := r.uvarint()
			if r.err == nil && len(e.leases) == 0 && n <= maxPresize {
				e.leases = make(map[string]*engEntry, n)
				rc.ents = make([]*engEntry, 0, n)
			}
		}
	case recNop:
	case recRecords, recRecEpoch:
		return e.replayRecords(rec[0], &r)
	default:
		return fmt.Errorf("%w: unknown type %d", errCorrupt, rec[0])
	}
	return nil
}

// maxPresize bounds the room made for a snapshot's entries before they
// are read: a corrupt count cannot make recovery allocate more than this
// many map slots ahead (the map still grows past it as entries come).
const maxPresize = 1 << 26

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
		e.sdl.set(s, now+int64(ttl))
	}
	ents := rc.ents
	if rc.dupe {
		ents = ents[:0]
		for _, ent := range e.leases {
			ents = append(ents, ent)
		}
	}
	dl := make(deadlines[*engEntry], 0, len(ents))
	for _, ent := range ents {
		if !ent.held {
			continue
		}
		if ls := ent.sess(); ls != nil {
			s := e.sessions[ls.id]
			ent.setSess(nil)
			if s == nil { // its session ended without the release logged
				ent.held = false
				rc.freed = append(rc.freed, ent)
				continue
			}
			e.attach(ent, s)
		} else {
			ent.dl.at = now + int64(max(ent.loggedTTL, ent.ttl))
			dl = append(dl, ent)
		}
		e.held++
	}
	dl.heapify()
	e.dl = dl
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
	// Every entry not held is in rc.freed: drop those forgotten already
	// (MaxTombstones, MaxTombstoneBytes).
	for _, ent := range rc.freed {
		if !ent.held && !ent.tomb && e.leases[ent.name] == ent {
			delete(e.leases, ent.name)
		}
	}
	rc.freed, rc.ents = nil, nil
}
