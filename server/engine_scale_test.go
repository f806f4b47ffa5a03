package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
	"unsafe"
)

// TestEntrySize: a held lease's entry stays within 96 bytes (it was 160:
// request id, data, session and queue lived in every entry, and the
// expiry heap's node with two back pointers). Ten million held leases are
// ten million entries.
func TestEntrySize(t *testing.T) {
	if n := unsafe.Sizeof(engEntry{}); n > 96 {
		t.Fatalf("engEntry is %d bytes, want at most 96", n)
	}
	// A recovery's slab of entries is a large object (over 32 KiB), which
	// takes whole 8 KiB pages: a slab of 256 took 27,264 bytes, its size
	// class, for 24,576 of entries (106.5 bytes an entry).
	if n := slabEntries * unsafe.Sizeof(engEntry{}); n <= 32<<10 || n%(8<<10) != 0 {
		t.Fatalf("a slab of entries is %d bytes, want a multiple of 8 KiB above 32 KiB", n)
	}
	e := openEngine(t, "")
	if _, err := e.Acquire(context.Background(), pxReq("plain", "o", time.Minute)); err != nil {
		t.Fatal(err)
	}
	e.lock()
	x := e.leases["plain"].x
	e.unlock()
	if x != nil {
		t.Fatalf("a lease without request id, data, session or waiters has extra fields: %+v", x)
	}
}

// TestDeadlineHeap drives the expiry heap with random sets and removals
// beside a plain list, and checks the earliest deadline after each step.
func TestDeadlineHeap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h deadlines[*engEntry]
	ents := make([]*engEntry, 200)
	for i := range ents {
		ents[i] = newEntry(fmt.Sprint(i))
	}
	in := map[*engEntry]bool{}
	for step := range 20000 {
		ent := ents[rng.IntN(len(ents))]
		if rng.IntN(3) == 0 {
			h.remove(ent)
			delete(in, ent)
		} else {
			h.set(ent, rng.Int64N(1000))
			in[ent] = true
		}
		if len(h) != len(in) {
			t.Fatalf("step %d: heap of %d, want %d", step, len(h), len(in))
		}
		for x := range in {
			if !h.has(x) {
				t.Fatalf("step %d: %s not in the heap", step, x.name)
			}
			if x.dl.at < h[0].dl.at {
				t.Fatalf("step %d: head due at %d, %s at %d", step, h[0].dl.at, x.name, x.dl.at)
			}
		}
	}
	// heapify orders any slice.
	h = h[:0]
	for _, ent := range ents {
		ent.dl.at = rng.Int64N(50)
		h = append(h, ent)
	}
	h.heapify()
	var got []int64
	for len(h) > 0 {
		got = append(got, h[0].dl.at)
		h.remove(h[0])
	}
	if !slices.IsSorted(got) || len(got) != len(ents) {
		t.Fatalf("heapify then removing the head: %v", got)
	}
}

// TestOwnerCache: equal owners share one copy; an owner is never answered
// with another (all of ownerSlots+1 distinct owners come back as given,
// so some share a slot).
func TestOwnerCache(t *testing.T) {
	var c ownerCache
	a := c.intern(string([]byte("owner-a")))
	b := c.intern(string([]byte("owner-a")))
	if unsafe.StringData(a) != unsafe.StringData(b) {
		t.Fatal("the same owner twice: two copies")
	}
	if got := c.internBytes([]byte("owner-a")); unsafe.StringData(got) != unsafe.StringData(a) {
		t.Fatal("internBytes of a cached owner: a new copy")
	}
	for range 2 {
		for i := range ownerSlots + 1 {
			want := fmt.Sprint("o", i)
			if got := c.intern(want); got != want {
				t.Fatalf("intern(%q) = %q", want, got)
			}
			if got := c.internBytes([]byte(want)); got != want {
				t.Fatalf("internBytes(%q) = %q", want, got)
			}
		}
	}
	if c.intern("") != "" || c.internBytes(nil) != "" {
		t.Fatal("empty owner")
	}
}

// TestSnapshotCountsEntries: a snapshot's token record says how many
// entries follow (held and tombstones), and recovery takes it as a hint
// only: a wrong count, too large or too small, recovers the same state.
func TestSnapshotCountsEntries(t *testing.T) {
	ctx := context.Background()
	e := openEngine(t, "")
	for i := range 10 {
		rec, err := e.Acquire(ctx, pxReq(fmt.Sprint("n", i), "o", time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			if err := e.Release(ctx, rec.Name, rec.Owner, rec.Token); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.lock()
	buf := e.encodeState()
	e.unlock()
	n, k := binary.Uvarint(buf)
	tok := buf[k : k+int(n)]
	r := reader{b: tok[1:]}
	if token, count := r.uvarint(), r.uvarint(); tok[0] != recToken || token != 10 || count != 10 || r.err != nil || len(r.b) != 0 {
		t.Fatalf("token record %x: want token 10, then 10 entries (6 held, 4 tombstones)", tok)
	}
	for _, count := range []uint64{0, 1, 10, maxPresize + 1, 1 << 62} {
		rest := buf[k+int(n):]
		rec := binary.AppendUvarint(encodeToken(10), count)
		snap := append(binary.AppendUvarint(nil, uint64(len(rec))), rec...)
		snap = append(snap, rest...)
		e2 := openEngine(t, "")
		if err := recoverFrom(e2, bytes.NewReader(snap)); err != nil {
			t.Fatalf("count %d: %v", count, err)
		}
		e2.lock()
		held, nTombs, token, entries := e2.held, e2.nTombs, e2.token, len(e2.leases)
		e2.unlock()
		if held != 6 || nTombs != 4 || token != 10 || entries != 10 {
			t.Fatalf("count %d: %d held, %d tombstones, token %d; want 6, 4, 10", count, held, nTombs, token)
		}
	}
}

// TestRecoveryLargeRecords: a snapshot record longer than the reader's
// buffer (which holds the others while they are applied) is read whole,
// and the records after it too.
func TestRecoveryLargeRecords(t *testing.T) {
	e := openEngine(t, "")
	var snap []byte
	put := func(rec []byte) {
		snap = binary.AppendUvarint(snap, uint64(len(rec)))
		snap = append(snap, rec...)
	}
	put(encodeToken(3))
	big := append(encodeNop(), make([]byte, 3<<20)...) // a barrier; its padding is ignored
	put(big)
	for i := range 3 {
		ent := newEntry(fmt.Sprint("after-big-", i))
		ent.owner, ent.token, ent.ttl = "o", uint64(i+1), time.Minute
		put(encodeGrant(ent))
		put(big)
	}
	if err := recoverFrom(e, bufio.NewReaderSize(bytes.NewReader(snap), 64<<10)); err != nil {
		t.Fatal(err)
	}
	e.lock()
	defer e.unlock()
	if e.held != 3 || e.leases["after-big-2"] == nil || e.leases["after-big-2"].owner != "o" {
		t.Fatalf("%d held after records longer than the buffer, want 3", e.held)
	}
	// A record cut short is an error, not the end.
	if err := recoverFrom(openEngine(t, ""), bytes.NewReader(snap[:len(snap)-10])); err == nil || err == io.EOF {
		t.Fatalf("a torn record: %v", err)
	}
}

// recoverFrom loads the snapshot content r into e, an engine opened
// without a directory (so empty), as OpenEngine recovers, under e's lock:
// its expiry loop runs.
func recoverFrom(e *Engine, r io.Reader) error {
	e.lock()
	defer e.unlock()
	rc := newRecovery(e)
	if err := rc.load(r); err != nil {
		return err
	}
	rc.finish()
	return nil
}

// TestCrashMidSnapshot: a process that died while writing a snapshot left
// its file unfinished; the leases come back from the previous snapshot and
// the log after it, and the next snapshot is written over it.
func TestCrashMidSnapshot(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	e, err := OpenEngine(EngineConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 50 {
		if _, err := e.Acquire(ctx, pxReq(fmt.Sprint("a", i), "o", time.Hour)); err != nil {
			t.Fatal(err)
		}
		want = append(want, fmt.Sprint("a", i))
	}
	forceSnapshot(t, e)
	for i := range 50 {
		if _, err := e.Acquire(ctx, pxReq(fmt.Sprint("b", i), "p", time.Hour)); err != nil {
			t.Fatal(err)
		}
		want = append(want, fmt.Sprint("b", i))
	}
	// The next snapshot, as the crash left it: half written, not renamed.
	e.lock()
	seq, err := e.log.Rotate()
	state := e.encodeState()
	e.unlock()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, fmt.Sprintf("snap-%016x.tmp", seq))
	if err := os.WriteFile(tmp, state[:len(state)/2], 0o600); err != nil {
		t.Fatal(err)
	}

	e = openEngine(t, dir)
	list, err := e.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range list {
		got = append(got, r.Name)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("recovered %d leases, want %d: %v", len(got), len(want), got)
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Fatalf("the unfinished snapshot is still there: %v", err)
	}
	forceSnapshot(t, e)
	rec, err := e.Acquire(ctx, pxReq("c", "q", time.Hour))
	if err != nil || rec.Token != 101 {
		t.Fatalf("the grant after: token %d, %v; want 101", rec.Token, err)
	}
}

// TestSnapshotDuplicateName: a snapshot holds each name once, and recovery
// puts its grants in the lease map without looking the name up; one that
// names an entry twice anyway (not written by any version) recovers as
// the log would: the later grant wins, the earlier one is gone, a release
// frees the grant it names.
func TestSnapshotDuplicateName(t *testing.T) {
	grant := func(name, owner string, token uint64) []byte {
		ent := newEntry(name)
		ent.owner, ent.token, ent.ttl = owner, token, time.Minute
		return encodeGrant(ent)
	}
	rel := func(name string, token uint64) []byte {
		ent := newEntry(name)
		ent.token = token
		return encodeRelease(ent)
	}
	var snap []byte
	for _, rec := range [][]byte{
		binary.AppendUvarint(encodeToken(5), 4),
		grant("a", "x", 1), grant("b", "x", 2), rel("b", 2),
		grant("a", "y", 3), grant("b", "y", 4), grant("c", "z", 5), rel("c", 5), rel("a", 1),
	} {
		snap = binary.AppendUvarint(snap, uint64(len(rec)))
		snap = append(snap, rec...)
	}
	e := openEngine(t, "")
	if err := recoverFrom(e, bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	e.lock()
	defer e.unlock()
	if e.held != 2 || len(e.leases) != 3 || e.nTombs != 1 {
		t.Fatalf("%d held, %d entries, %d tombstones; want 2 (a, b), 3, 1 (c)", e.held, len(e.leases), e.nTombs)
	}
	for name, want := range map[string]uint64{"a": 3, "b": 4} {
		if ent := e.leases[name]; ent == nil || !ent.held || ent.token != want || ent.owner != "y" || !e.dl.has(ent) {
			t.Fatalf("%s: %+v, want held by y with token %d", name, ent, want)
		}
	}
	if len(e.dl) != 2 {
		t.Fatalf("%d deadlines, want 2", len(e.dl))
	}
}
