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
// built in one pass rather than one push per lease. The entries come from
// slabs (engine_entry.go), the collector is off meanwhile (pauseGC), and
// a snapshot's entries go into the map on a goroutine of their own while
// the records after them are decoded (inserter).

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"sync"
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
	slabs  slabs // where the entries it makes come from
	// batch: a snapshot's entries not yet handed to the inserter; ins:
	// the inserter (nil when none runs).
	batch []*engEntry
	ins   *inserter
}

func newRecovery(e *Engine) *recovery {
	return &recovery{e: e, sessions: map[string]time.Duration{}}
}

func (rc *recovery) load(r io.Reader) error {
	rc.inSnap = true
	defer func() {
		rc.sync()
		rc.inSnap, rc.last = false, nil
	}()
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
			ent = rc.slabs.entry(name)
			rc.insert(ent)
			rc.ents = append(rc.ents, ent)
			rc.last = ent
		} else if ent = e.leases[string(name)]; ent == nil {
			ent = rc.slabs.entry(name)
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
			rc.sync()
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
		rc.sync()
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
			rc.sync()
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

// A snapshot's entries are put in the lease map by a goroutine of their
// own, the inserter, while load decodes the records after them: the
// inserts (a cache miss or two each in a map of ten million) were half of
// a restart's time, and decoding most of the rest. load hands the entries
// over in batches; a record that needs the map (one that looks a name up,
// or sizes the map) waits for the inserter to finish first (sync), and
// so does the end of the snapshot. While the inserter runs, load touches
// neither e.leases nor rc.dupe, and the inserter reads nothing of an
// entry but its name, which no one changes.
type inserter struct {
	batches chan []*engEntry
	free    chan []*engEntry // batches inserted, to fill again
	done    chan bool        // the inserter's end: whether it saw a name twice
}

const insertBatch = 1024

// insert puts a snapshot's entry in e.leases, now or through the
// inserter, and notes a name seen twice in rc.dupe.
func (rc *recovery) insert(ent *engEntry) {
	if rc.ins == nil && rc.pipelined() {
		rc.ins = startInserter(rc.e.leases)
	}
	if rc.ins == nil {
		n := len(rc.e.leases)
		rc.e.leases[ent.name] = ent
		rc.dupe = rc.dupe || len(rc.e.leases) == n
		return
	}
	if rc.batch == nil {
		select {
		case rc.batch = <-rc.ins.free:
		default:
			rc.batch = make([]*engEntry, 0, insertBatch)
		}
	}
	rc.batch = append(rc.batch, ent)
	if len(rc.batch) == insertBatch {
		rc.ins.batches <- rc.batch
		rc.batch = nil
	}
}

// pipelined reports whether a snapshot's entries go through an inserter:
// when there is a second processor to run it.
func (rc *recovery) pipelined() bool { return runtime.GOMAXPROCS(0) > 1 }

func startInserter(m map[string]*engEntry) *inserter {
	ins := &inserter{batches: make(chan []*engEntry, 8), free: make(chan []*engEntry, 16), done: make(chan bool, 1)}
	go func() {
		dupe := false
		for b := range ins.batches {
			for _, ent := range b {
				n := len(m)
				m[ent.name] = ent
				dupe = dupe || len(m) == n
			}
			clear(b)
			select {
			case ins.free <- b[:0]:
			default:
			}
		}
		ins.done <- dupe
	}()
	return ins
}

// sync waits until every entry handed to the inserter is in e.leases and
// stops it (insert starts another if more come).
func (rc *recovery) sync() {
	if rc.ins == nil {
		return
	}
	if len(rc.batch) > 0 {
		rc.ins.batches <- rc.batch
	}
	rc.batch = nil
	close(rc.ins.batches)
	rc.dupe = <-rc.ins.done || rc.dupe
	rc.ins = nil
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

// The collector is off while an engine recovers (pauseGC). Recovery
// builds a heap it keeps (ten million leases: 1.7 GB), and what it
// allocates and drops is bounded by the bytes it reads (its read buffer,
// the map's old tables as it grows, versioned records overwritten in the
// log). With the collector on, each cycle marked all that was built so
// far: 7 cycles in a restart of 10M leases. The first cycle after it
// marks the recovered heap once, concurrently with the server's work.
//
// pauses counts the recoveries under way in the process, so that engines
// opened at once (tests) leave the setting as it was when the last one
// ends. A memory limit (GOMEMLIMIT, debug.SetMemoryLimit) still holds
// while the collector is off.
var pauses struct {
	sync.Mutex
	n   int
	old int // the GC percent before the first of them
}

// pauseGC turns the collector off until the returned func is called.
func pauseGC() (resume func()) {
	pauses.Lock()
	if pauses.n == 0 {
		pauses.old = debug.SetGCPercent(-1)
	}
	pauses.n++
	pauses.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			pauses.Lock()
			if pauses.n--; pauses.n == 0 {
				debug.SetGCPercent(pauses.old)
			}
			pauses.Unlock()
		})
	}
}
