package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/prometheus/client_golang/prometheus"
)

// The engine's memory bounds in bytes: MaxTombstoneBytes (engine_tombs.go)
// and MaxRecordBytes (engine_records.go), from the red team of `leasehold
// serve`: 657,000 take/release cycles on new 256-byte names with 250-byte
// owners had taken a server from 254 MB to 2.9 GB of RSS (tombstones were
// bounded only in number, at 1,048,576), and 8,000 records of 64 KiB from
// 30 MB to 2.5 GB (records were not bounded at all).

// liveHeap is the heap in use after full collections.
func liveHeap() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// longTombs makes the names, owners and request ids of tombstones as long
// as the red team's: 256-byte names, 250-byte owners, 64-byte request ids.
type longTombs struct{ pad string }

func newLongTombs() longTombs { return longTombs{strings.Repeat("x", 250)} }

func (l longTombs) name(i int) string {
	return fmt.Sprintf("tomb/%09d/%s", i, l.pad)[:leasehold.MaxNameLen]
}
func (l longTombs) owner(i int) string { return fmt.Sprintf("%09d/%s", i, l.pad)[:250] }
func (l longTombs) reqID(i int) string { return fmt.Sprintf("%09d/%s", i, l.pad)[:64] }

// size is what each of their tombstones counts.
func (l longTombs) size() int64 { return tombOverhead + int64(len(l.name(0))+len(l.owner(0))) }

// cycle takes and releases the lease of name(i), returning its token.
func (l longTombs) cycle(t *testing.T, e *Engine, i int) uint64 {
	t.Helper()
	ctx := context.Background()
	req := pxReq(l.name(i), l.owner(i), time.Hour)
	req.RequestID = l.reqID(i)
	rec, err := e.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Release(ctx, l.name(i), l.owner(i), rec.Token); err != nil {
		t.Fatal(err)
	}
	return rec.Token
}

// checkTombBytes checks the engine's tombstones against bound: kept ×
// per-entry bytes within it, yet not fewer kept than it has room for less
// one (the oldest are forgotten only as needed), tombBytes their sum, no
// request id or data kept, and no entry of a forgotten one left. It
// returns how many are kept.
func checkTombBytes(t *testing.T, e *Engine, l longTombs, bound int64) int {
	t.Helper()
	e.lock()
	defer e.unlock()
	n, per := int64(e.nTombs), l.size()
	if n*per > bound {
		t.Errorf("%d tombstones of %d bytes kept: %d bytes, over the bound of %d", n, per, n*per, bound)
	}
	if room := bound / per; n < room-1 {
		t.Errorf("%d tombstones kept, want %d (the bound has room for them)", n, room)
	}
	var sum int64
	keeping := 0 // tombstones that keep a request id or data
	for _, ts := range e.tombs {
		if !ts.live() {
			continue
		}
		sum += tombSize(ts.ent)
		if ts.ent.reqID() != "" || ts.ent.data() != "" {
			keeping++
		}
	}
	if keeping > 0 {
		t.Errorf("%d of %d tombstones keep their request id or data", keeping, n)
	}
	if sum != e.tombBytes || sum != n*per {
		t.Errorf("tombBytes %d, its tombstones' sizes sum to %d, want %d", e.tombBytes, sum, n*per)
	}
	if len(e.leases) != int(n) {
		t.Errorf("%d entries in the engine for %d tombstones: forgotten ones are left", len(e.leases), n)
	}
	return int(n)
}

// checkNewestKept: of the cycles made, a repeated release of the newest is
// answered nil and of the oldest ErrNotHeld (its tombstone forgotten).
func checkNewestKept(t *testing.T, e *Engine, l longTombs, tokens []uint64, kept int) {
	t.Helper()
	ctx := context.Background()
	last := len(tokens) - 1
	if err := e.Release(ctx, l.name(last), l.owner(last), tokens[last]); err != nil {
		t.Errorf("repeated release of the newest grant: %v, want nil", err)
	}
	if i := last - kept + 1; kept > 0 {
		if err := e.Release(ctx, l.name(i), l.owner(i), tokens[i]); err != nil {
			t.Errorf("repeated release of the oldest grant kept: %v, want nil", err)
		}
	}
	if err := e.Release(ctx, l.name(0), l.owner(0), tokens[0]); !errors.Is(err, leasehold.ErrNotHeld) {
		t.Errorf("repeated release of the first grant, forgotten: %v, want ErrNotHeld", err)
	}
}

// TestTombstoneBytesBound: 40,000 take/release cycles on new long names
// (30 MB of tombstones without a bound in bytes) keep at most
// MaxTombstoneBytes of tombstones, the newest, and the live heap grows by
// at most 1.25 times the bound.
func TestTombstoneBytesBound(t *testing.T) {
	const bound, cycles = 4 << 20, 40000
	e, err := OpenEngine(EngineConfig{MaxTombstoneBytes: bound})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	l := newLongTombs()
	tokens := make([]uint64, cycles)
	before := liveHeap()
	for i := range cycles {
		tokens[i] = l.cycle(t, e, i)
	}
	grew := liveHeap() - before
	kept := checkTombBytes(t, e, l, bound)
	if ceiling := int64(bound * 5 / 4); grew > ceiling {
		t.Errorf("the live heap grew by %d bytes for %d tombstones kept, over the ceiling of %d", grew, kept, ceiling)
	}
	t.Logf("%d tombstones of %d bytes kept; live heap +%d bytes", kept, l.size(), grew)
	checkNewestKept(t, e, l, tokens, kept)
}

// TestTombstoneBytesBoundRestart: recovery (from the log, or from a
// snapshot) keeps the bound too, the newest tombstones.
func TestTombstoneBytesBoundRestart(t *testing.T) {
	const bound, cycles = 1 << 20, 5000
	for _, snap := range []bool{false, true} {
		t.Run(fmt.Sprint("snapshot=", snap), func(t *testing.T) {
			dir := t.TempDir()
			open := func(max int64) *Engine {
				e, err := OpenEngine(EngineConfig{Dir: dir, NoSync: true, MaxTombstoneBytes: max})
				if err != nil {
					t.Fatal(err)
				}
				return e
			}
			// Made without the bound (all 5,000 kept), recovered with it.
			e := open(1 << 30)
			l := newLongTombs()
			tokens := make([]uint64, cycles)
			for i := range cycles {
				tokens[i] = l.cycle(t, e, i)
			}
			if snap {
				forceSnapshot(t, e)
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			e = open(bound)
			defer e.Close()
			kept := checkTombBytes(t, e, l, bound)
			checkNewestKept(t, e, l, tokens, kept)
		})
	}
}

// TestEngineBoundsConfig: zero takes the defaults; a negative bound, or a
// tombstone bound too small for one tombstone, is refused.
func TestEngineBoundsConfig(t *testing.T) {
	e, err := OpenEngine(EngineConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if e.cfg.MaxTombstoneBytes != 64<<20 || e.cfg.MaxRecordBytes != 128<<20 {
		t.Errorf("defaults: MaxTombstoneBytes %d, MaxRecordBytes %d, want 64 MiB and 128 MiB", e.cfg.MaxTombstoneBytes, e.cfg.MaxRecordBytes)
	}
	e.Close()
	for _, c := range []struct {
		cfg  EngineConfig
		want string
	}{
		{EngineConfig{MaxTombstoneBytes: -1}, "MaxTombstoneBytes is -1: it must not be negative"},
		{EngineConfig{MaxTombstoneBytes: maxTombSize - 1}, fmt.Sprintf("at least one tombstone of the longest name and owner (%d bytes)", maxTombSize)},
		{EngineConfig{MaxRecordBytes: -5}, "MaxRecordBytes is -5: it must not be negative"},
	} {
		e, err := OpenEngine(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("OpenEngine(%+v): %v, want an error saying %q", c.cfg, err, c.want)
		}
		if e != nil {
			e.Close()
		}
	}
}

// wantRecordsFull checks that err refuses a record write at limit.
func wantRecordsFull(t *testing.T, err error, limit int64) {
	t.Helper()
	var qe *QuotaError
	if !errors.As(err, &qe) || qe.Resource != QuotaRecords || qe.Limit != limit || qe.Have <= limit {
		t.Fatalf("got %v, want a *QuotaError on %q with limit %d", err, QuotaRecords, limit)
	}
}

// recsTotal is the engine's count of its records' bytes, checked
// against their sizes summed.
func recsTotal(t *testing.T, e *Engine) int64 {
	t.Helper()
	e.lock()
	defer e.unlock()
	var sum int64
	for k, r := range e.recs.m {
		sum += recSize(k, r.value)
	}
	if sum != e.recs.bytes {
		t.Fatalf("the engine counts %d bytes of records, their sizes sum to %d", e.recs.bytes, sum)
	}
	return sum
}

// TestRecordBytesBound: writes past MaxRecordBytes are refused and change
// nothing (a put, an update that grows, an add that creates a key, a
// transaction whole, though each of its writes alone would fit); writes
// that do not grow the records pass; a delete makes room; a restart (from
// the log, or from a snapshot) finds the same total and keeps refusing.
func TestRecordBytesBound(t *testing.T) {
	const bound = 1 << 20
	ctx := context.Background()
	val := bytes.Repeat([]byte("v"), 32<<10)
	key := func(i int) string { return fmt.Sprintf("big/%03d", i) }
	per := recSize(key(0), string(val))
	for _, snap := range []bool{false, true} {
		t.Run(fmt.Sprint("snapshot=", snap), func(t *testing.T) {
			dir := t.TempDir()
			open := func() *Engine {
				e, err := OpenEngine(EngineConfig{Dir: dir, NoSync: true, MaxRecordBytes: bound})
				if err != nil {
					t.Fatal(err)
				}
				return e
			}
			e := open()
			defer func() { e.Close() }()

			// As many 32 KiB records as the bound has room for.
			n := 0
			var err error
			for ; n < 100; n++ {
				if _, err = e.PutRecord(ctx, key(n), val, 0); err != nil {
					break
				}
			}
			wantRecordsFull(t, err, bound)
			if want := int(bound / per); n != want {
				t.Fatalf("%d records of %d bytes written before the refusal, want %d", n, per, want)
			}
			// The rest of the room filled to the byte.
			fill := bound - recsTotal(t, e) - recSize("fill", "")
			if _, err := e.PutRecord(ctx, "fill", bytes.Repeat([]byte("f"), int(fill)), 0); err != nil {
				t.Fatalf("a record filling the bound exactly: %v", err)
			}
			if got := recsTotal(t, e); got != bound {
				t.Fatalf("%d bytes of records, want the bound, %d", got, bound)
			}

			// Refused, changing nothing.
			state := recordState(e)
			_, err = e.PutRecord(ctx, "new", []byte("x"), 0)
			wantRecordsFull(t, err, bound)
			_, err = e.PutRecord(ctx, key(0), append([]byte("v"), val...), 1)
			wantRecordsFull(t, err, bound)
			_, _, err = e.AddCounter(ctx, "counter", 1)
			wantRecordsFull(t, err, bound)
			_, err = e.Txn(ctx, leasehold.Txn{Then: []leasehold.Write{{Key: key(1), Delete: true}, {Key: "t1", Value: val}, {Key: "t2", Value: []byte("x")}}})
			wantRecordsFull(t, err, bound)
			if got := recordState(e); got != state {
				t.Fatal("refused writes changed the records")
			}
			if got := recsTotal(t, e); got != bound {
				t.Fatalf("%d bytes of records after refused writes, want %d", got, bound)
			}

			// Writes that do not grow the records pass: an update to a value
			// as long, a transaction that deletes as much as it writes.
			if v, err := e.PutRecord(ctx, key(0), bytes.Repeat([]byte("w"), len(val)), 1); err != nil || v != 2 {
				t.Fatalf("an update as long, at the bound: %d %v", v, err)
			}
			if _, err := e.Txn(ctx, leasehold.Txn{Then: []leasehold.Write{{Key: key(1), Delete: true}, {Key: key(n), Value: val}}}); err != nil {
				t.Fatalf("a transaction that deletes as much as it writes: %v", err)
			}
			// A delete makes room; a transaction is refused whole when its
			// writes together do not fit, though each alone would.
			if err := e.DeleteRecord(ctx, key(2), 1); err != nil {
				t.Fatal(err)
			}
			state = recordState(e)
			half := val[:len(val)/2]
			_, err = e.Txn(ctx, leasehold.Txn{Then: []leasehold.Write{{Key: "h1", Value: half}, {Key: "h2", Value: half}, {Key: "h3", Value: half}}})
			wantRecordsFull(t, err, bound)
			if got := recordState(e); got != state {
				t.Fatal("a refused transaction changed the records")
			}
			if _, err := e.PutRecord(ctx, key(2), val, 0); err != nil {
				t.Fatalf("a put into the room a delete made: %v", err)
			}
			total, state := recsTotal(t, e), recordState(e)

			// A restart finds the same total, and refuses as before.
			if snap {
				forceSnapshot(t, e)
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			e = open()
			if got := recsTotal(t, e); got != total {
				t.Fatalf("%d bytes of records after the restart, want %d", got, total)
			}
			if got := recordState(e); got != state {
				t.Fatal("the restart changed the records")
			}
			_, err = e.PutRecord(ctx, "new", []byte("x"), 0)
			wantRecordsFull(t, err, bound)
			if err := e.DeleteRecord(ctx, "fill", 1); err != nil {
				t.Fatal(err)
			}
			if _, err := e.PutRecord(ctx, "new", []byte("x"), 0); err != nil {
				t.Fatalf("a put after a delete, after the restart: %v", err)
			}
		})
	}
}

// TestRecordBytesBoundHeap: as the red team's attack, 64 KiB records
// written until refused (400 of them, 26 MB, without the bound) grow the
// live heap by at most 1.25 times MaxRecordBytes.
func TestRecordBytesBoundHeap(t *testing.T) {
	const bound = 8 << 20
	e, err := OpenEngine(EngineConfig{MaxRecordBytes: bound})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	val := bytes.Repeat([]byte("v"), leasehold.MaxValueLen)
	before := liveHeap()
	written := 0
	for i := range 400 {
		if _, err := e.PutRecord(ctx, fmt.Sprintf("heap/%03d", i), val, 0); err == nil {
			written++
		} else {
			wantRecordsFull(t, err, bound)
		}
	}
	grew := liveHeap() - before
	if ceiling := int64(bound * 5 / 4); grew > ceiling {
		t.Errorf("%d records of 64 KiB written: the live heap grew by %d bytes, over the ceiling of %d", written, grew, ceiling)
	}
	t.Logf("%d records of 64 KiB written; live heap +%d bytes", written, grew)
}

// TestRecordBytesBoundHTTP: the HTTP API answers a write past
// MaxRecordBytes (a put, a transaction, an add) 429 quota-exceeded with
// resource "records" and the limit, changing nothing.
func TestRecordBytesBoundHTTP(t *testing.T) {
	val := strings.Repeat("v", 3000)
	bound := recSize("a", val) + 50 // no room for a new record
	eng, err := OpenEngine(EngineConfig{MaxRecordBytes: bound})
	if err != nil {
		t.Fatal(err)
	}
	ts := htServe(t, eng, prometheus.NewRegistry(), HandlerOptions{})
	ts.want(ts.do("PUT", "/v1/records/a", "", val, "If-None-Match", "*"), 201, "")
	state := recordState(eng)
	for _, r := range []htResp{
		ts.do("PUT", "/v1/records/b", "", "x", "If-None-Match", "*"),
		ts.do("PUT", "/v1/records/a", "", val+val, "If-Match", `"1"`),
		ts.do("POST", "/v1/txn", "", `{"then":[{"key":"c","value":"x"}]}`),
		ts.do("POST", "/v1/records/n/add", "", `{"delta":1}`),
	} {
		ts.want(r, 429, "quota-exceeded")
		if r.str("resource") != QuotaRecords || r.num("limit") != float64(bound) {
			t.Fatalf("429 body %s, want resource %q and limit %d", r.body, QuotaRecords, bound)
		}
	}
	if got := recordState(eng); got != state {
		t.Fatalf("state after refused writes %q, want %q", got, state)
	}
	// A write that shrinks the records passes, and makes room.
	ts.want(ts.do("PUT", "/v1/records/a", "", "short", "If-Match", `"1"`), 200, "")
	ts.want(ts.do("POST", "/v1/records/n/add", "", `{"delta":1}`), 200, "")
}
