package server

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
//   - at most MaxTombstones at once: beyond that the oldest are forgotten
//     first;
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
// one global counter, so fencing does not depend on tombstones.

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
// tombstone if that makes more than MaxTombstones. e.mu held.
func (e *Engine) tomb(ent *engEntry, now int64) {
	if ent.tomb {
		return
	}
	ent.tomb = true
	ent.data = "" // not needed to recognise a repeated release
	e.nTombs++
	e.tombs = append(e.tombs, tombstone{ent, now, ent.token})
	if e.nTombs > e.cfg.MaxTombstones {
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
	}
}

// sweepTombs forgets the tombstones made TombstoneTTL or longer before now,
// and the oldest ones beyond MaxTombstones. e.mu held.
func (e *Engine) sweepTombs(now int64) {
	i := 0
	for ; i < len(e.tombs); i++ {
		t := e.tombs[i]
		if !t.live() {
			continue // taken again since
		}
		if now-t.at < int64(e.cfg.TombstoneTTL) && e.nTombs <= e.cfg.MaxTombstones {
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
