package server

// The engine (engine.go). An entry's rarer fields (engExtra) and the
// accessors that read and set them.

import (
	"hash/maphash"
	"unsafe"
)

// reqID is the request id of the entry's grant ("" if none).
func (ent *engEntry) reqID() string {
	if ent.x == nil {
		return ""
	}
	return ent.x.reqID
}

// data is the data of the entry's grant ("" if none).
func (ent *engEntry) data() string {
	if ent.x == nil {
		return ""
	}
	return ent.x.data
}

// sess is the session the entry's grant belongs to (nil if none).
func (ent *engEntry) sess() *engSession {
	if ent.x == nil {
		return nil
	}
	return ent.x.sess
}

func (ent *engEntry) queue() []*engWaiter {
	if ent.x == nil {
		return nil
	}
	return ent.x.wq
}

// ext returns ent's extra fields, allocating them if it has none.
func (ent *engEntry) ext() *engExtra {
	if ent.x == nil {
		ent.x = &engExtra{}
	}
	return ent.x
}

// trim drops ent's extra fields once none is set.
func (ent *engEntry) trim() {
	if x := ent.x; x != nil && x.reqID == "" && x.data == "" && x.sess == nil && len(x.wq) == 0 {
		ent.x = nil
	}
}

// setGrantFields sets the request id and data of ent's grant.
func (ent *engEntry) setGrantFields(reqID, data string) {
	if reqID == "" && data == "" && ent.x == nil {
		return
	}
	x := ent.ext()
	x.reqID, x.data = reqID, data
	ent.trim()
}

// setSess sets the session ent's grant belongs to.
func (ent *engEntry) setSess(s *engSession) {
	if s == nil && ent.x == nil {
		return
	}
	ent.ext().sess = s
	ent.trim()
}

func (ent *engEntry) setQueue(q []*engWaiter) {
	if len(q) == 0 && ent.x == nil {
		return
	}
	if len(q) == 0 {
		q = nil // let the array go
	}
	ent.ext().wq = q
	ent.trim()
}

// newEntry returns the entry of a name not in e.leases yet.
func newEntry(name string) *engEntry {
	ent := &engEntry{name: name}
	ent.dl.idx = -1
	return ent
}

// ownerCache lets the leases of one owner share the bytes of its name: a
// lease keeps the copy of its owner that the cache holds, if the cache
// holds one, instead of the request's (or the log record's). It is a
// direct-mapped table of the owners seen lately, without counts: bounded
// (ownerSlots strings), never wrong (a slot is used only when equal), and
// a miss costs nothing but the lookup. Used with e.mu held.
type ownerCache struct {
	seed  maphash.Seed
	slots []string
}

const ownerSlots = 4096 // a power of two

func (c *ownerCache) slot(h uint64) *string {
	if c.slots == nil {
		c.seed = maphash.MakeSeed()
		c.slots = make([]string, ownerSlots)
	}
	return &c.slots[h&(ownerSlots-1)]
}

// intern returns s, or an equal string the cache holds.
func (c *ownerCache) intern(s string) string {
	if s == "" {
		return s
	}
	if c.slots == nil {
		c.slot(0)
	}
	p := c.slot(maphash.String(c.seed, s))
	if *p != s {
		*p = s
	}
	return *p
}

// internBytes is intern for bytes that are not kept: they are copied only
// when the cache does not hold them.
func (c *ownerCache) internBytes(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if c.slots == nil {
		c.slot(0)
	}
	p := c.slot(maphash.Bytes(c.seed, b))
	if *p != string(b) {
		*p = string(b)
	}
	return *p
}

// slabs makes the entries of a recovery in arrays of slabEntries, and
// copies their names into shared buffers of slabNameBytes: ten million
// entries with 13-byte names are then 24,000 allocations instead of twenty
// million, and the collector finds 24,000 objects where it found twenty
// million (each a cache miss to look its span up: marking the heap of 10M
// recovered leases took a third of the CPU it did). An entry is used and
// forgotten as any other; the memory of a slab (or a names buffer) goes
// back once all of its entries are forgotten. Used by one goroutine at a
// time.
type slabs struct {
	ents  []engEntry
	names []byte
}

const (
	slabEntries   = 512      // 48 KiB: whole pages, no room lost to rounding
	slabNameBytes = 32 << 10 // a name longer than a sixteenth of it gets its own
)

// entry returns a new entry of name (its bytes are copied).
func (s *slabs) entry(name []byte) *engEntry {
	if len(s.ents) == 0 {
		s.ents = make([]engEntry, slabEntries)
	}
	ent := &s.ents[0]
	s.ents = s.ents[1:]
	ent.name = s.name(name)
	ent.dl.idx = -1
	return ent
}

// name returns a copy of b as a string, in the shared buffer if it fits.
func (s *slabs) name(b []byte) string {
	if len(b) == 0 || len(b) > slabNameBytes/16 {
		return string(b)
	}
	if len(b) > cap(s.names)-len(s.names) {
		s.names = make([]byte, 0, slabNameBytes)
	}
	off := len(s.names)
	s.names = append(s.names, b...)
	// The bytes are never written again: later names go after them.
	return unsafe.String(&s.names[off], len(b))
}
