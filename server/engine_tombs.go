package server

import "github.com/leasehold/leasehold"

// Tombstones: freed grants remembered for a repeated release.
//
// The Store contract lets a holder repeat its release (after a lost
// reply, say) and get nil. Once a grant is released, force-released or
// expired and no waiter takes the name over, the engine keeps its entry
// (name, owner, token) as a tombstone:
//
//   - for TombstoneTTL after it was freed, counted on the engine's
//     monotonic clock, then it is forgotten (by the expiry loop, so a
//     little later rather than earlier);
//   - at most MaxTombstones at once, and at most MaxTombstoneBytes of
//     them (tombSize each): beyond either the oldest are forgotten first;
//   - across restarts: a snapshot records every tombstone (as its grant
//     followed by its release, the same records the log holds, in the
//     order they were freed), and recovery makes a tombstone of every
//     freed grant it finds in the snapshot or the log after it, giving
//     each a full TombstoneTTL again from the moment of recovery (a
//     restart never shortens the time a freed grant is remembered; it may
//     lengthen it for grants freed in the log since the last snapshot).
//
// A new grant of the name ends its tombstone. Forgetting a tombstone
// changes no lease: the name is free either way, and tokens come from the
// one global counter, so fencing does not depend on tombstones. A release
// repeated after its tombstone was forgotten is answered as the release
// of a grant never made: leasehold.ErrNotHeld (HTTP 409 not-held, RESP
// -NOTHELD).
//
// A tombstone keeps what recognising a repeated release needs: the name,
// owner and token. Its data and request id are dropped (a retried acquire
// is recognised only while its grant is held), and it has no queue or
// session (it is made only when no waiter takes the name over).

// tombOverhead is what a tombstone takes in memory besides its name's and
// owner's bytes: its engEntry, its slot in e.leases, its element of
// e.tombs with their spare room, and the rounding up of the strings'
// allocations. Measured as live heap after GC with runtime.ReadMemStats
// when an entry took 160 bytes: 234 bytes each for 100,000 tombstones
// made in a row (with 256-byte names and 250-byte owners, and with
// 10-byte ones); 329 to 337 at the bound, where every new one forgets the
// oldest (as TestTombstoneBytesBound: 5,504 and 44,034 kept of 40,000 and
// 200,000 made; the churned map and e.tombs keep more spare room). An
// entry takes 96 bytes now (engine.go), so the bound over-counts by about
// 64 bytes a tombstone: it stays a bound.
const tombOverhead = 340

// maxTombSize is the largest tombSize: the longest name and owner.
const maxTombSize = tombOverhead + leasehold.MaxNameLen + leasehold.MaxOwnerLen

// tombSize is what ent counts against MaxTombstoneBytes while it is a
// tombstone (its name and owner do not change meanwhile).
func tombSize(ent *engEntry) int64 { return tombOverhead + int64(len(ent.name)+len(ent.owner)) }

// tombsOver reports whether the tombstones are past MaxTombstones or
// MaxTombstoneBytes. e.mu held.
func (e *Engine) tombsOver() bool {
	return e.nTombs > e.cfg.MaxTombstones || e.tombBytes > e.cfg.MaxTombstoneBytes
}

// tombstone is one entry of e.tombs, the tombstones in the order they were
// made. An entry whose grant was taken over since (its entry no longer a
// tombstone, or a tombstone of a later grant) is stale and skipped.
type tombstone struct {
	ent   *engEntry
	at    int64  // engine clock when it was made
	token uint64 // the grant it remembers
}

func (t tombstone) live() bool { return t.ent.tomb && t.ent.token == t.token }

// tomb makes a freed, unqueued entry a tombstone, forgetting the oldest
// tombstones if that makes more than MaxTombstones or MaxTombstoneBytes.
// e.mu held.
func (e *Engine) tomb(ent *engEntry, now int64) {
	if ent.tomb {
		return
	}
	ent.tomb = true
	ent.setGrantFields("", "") // not needed to recognise a repeated release
	e.nTombs++
	e.tombBytes += tombSize(ent)
	e.tombs = append(e.tombs, tombstone{ent, now, ent.token})
	if e.tombsOver() {
		e.sweepTombs(now)
	}
	if len(e.tombs) > 2*e.nTombs+1024 {
		e.compactTombs()
	}
}

// unTomb ends ent's tombstone, if it is one: its name is granted again.
// e.mu held.
func (e *Engine) unTomb(ent *engEntry) {
	if ent.tomb {
		ent.tomb = false
		e.nTombs--
		e.tombBytes -= tombSize(ent)
	}
}

// sweepTombs forgets the tombstones made TombstoneTTL or longer before now,
// and the oldest ones beyond MaxTombstones or MaxTombstoneBytes. e.mu
// held.
func (e *Engine) sweepTombs(now int64) {
	i := 0
	for ; i < len(e.tombs); i++ {
		t := e.tombs[i]
		if !t.live() {
			continue // taken again since
		}
		if now-t.at < int64(e.cfg.TombstoneTTL) && !e.tombsOver() {
			break
		}
		e.unTomb(t.ent)
		if !t.ent.held && len(t.ent.queue()) == 0 && t.ent.pending.Load() == 0 && e.leases[t.ent.name] == t.ent {
			delete(e.leases, t.ent.name)
		}
	}
	if i > 0 {
		// Shift in place; reallocate only when the slice is mostly empty.
		n := copy(e.tombs, e.tombs[i:])
		clear(e.tombs[n:])
		e.tombs = e.tombs[:n]
		if cap(e.tombs) > 1024 && n < cap(e.tombs)/4 {
			e.tombs = append([]tombstone(nil), e.tombs...)
		}
	}
}

// compactTombs drops the stale entries of e.tombs, so that names freed and
// taken again many times within TombstoneTTL do not grow it. e.mu held.
func (e *Engine) compactTombs() {
	n := 0
	for _, t := range e.tombs {
		if t.live() {
			e.tombs[n] = t
			n++
		}
	}
	clear(e.tombs[n:])
	e.tombs = e.tombs[:n]
}

// encodeTombs adds every tombstone to a snapshot, oldest first, each as
// its grant followed by its release: recovery (also by an older version of
// the engine) replays them as it replays the log. e.mu held.
func (e *Engine) encodeTombs(put func([]byte)) {
	for _, t := range e.tombs {
		if t.live() {
			put(encodeGrant(t.ent))
			put(encodeRelease(t.ent))
		}
	}
}
