package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// fillSnapshot writes a snapshot of n held leases (names "r/0" on, 100
// owners, TTL 1 h) into a new directory and returns it. The leases are put
// in the engine's state directly, not acquired: only the snapshot is
// wanted.
func fillSnapshot(t testing.TB, n int) string {
	t.Helper()
	dir := t.TempDir()
	e, err := OpenEngine(EngineConfig{Dir: dir, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	e.lock()
	now := e.now()
	for i := range n {
		ent := newEntry("r/" + strconv.Itoa(i))
		ent.owner = e.owners.intern("owner-" + strconv.Itoa(i%100))
		e.token++
		ent.token, ent.ttl, ent.acquired, ent.held = e.token, time.Hour, int64(i), true
		e.leases[ent.name] = ent
		e.dl.set(ent, now+int64(time.Hour))
		e.held++
	}
	e.unlock()
	if err := e.snapshotNow(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestRecoveryWithoutCollector: the collector does not run while an
// engine recovers (each cycle marked the whole heap recovered so far:
// 7 cycles for 10M leases), and the GC percent is as it was once every
// recovery is over, also when several engines recover at once.
func TestRecoveryWithoutCollector(t *testing.T) {
	dir := fillSnapshot(t, 200_000) // about 35 MB of heap: several cycles with the collector on
	old := debug.SetGCPercent(137)
	defer debug.SetGCPercent(old)
	var before, after runtime.MemStats
	runtime.GC() // the next cycle is due at a heap well below the recovered one
	runtime.ReadMemStats(&before)
	e, err := OpenEngine(EngineConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if st := e.Stats(); st.Held != 200_000 {
		t.Fatalf("%d held after the restart, want 200000", st.Held)
	}
	if n := after.NumGC - before.NumGC; n != 0 {
		t.Errorf("%d collections while the engine recovered, want 0", n)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if got := debug.SetGCPercent(137); got != 137 {
		t.Fatalf("GC percent %d after the recovery, want 137 as before it", got)
	}

	// Several at once, some failing (a directory that is a file).
	bad := t.TempDir() + "/file"
	if err := os.WriteFile(bad, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := dir
			if i%2 == 1 {
				d = bad
			} else if i > 0 {
				d = t.TempDir()
			}
			e, err := OpenEngine(EngineConfig{Dir: d})
			if err != nil {
				if d != bad {
					errs <- fmt.Errorf("open %d: %w", i, err)
				}
				return
			}
			errs <- e.Close()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := debug.SetGCPercent(137); got != 137 {
		t.Fatalf("GC percent %d after 8 engines recovered at once, want 137 as before", got)
	}
}

// engineState is what recovery must bring back of an engine, one line per
// entry sorted by name, then the counters: all but the deadlines (a
// restart gives every lease and tombstone its full time again) and the
// TTL of the last renewal (only a renewal that raises the largest TTL is
// logged: a lease comes back with its largest, as "logged").
func engineState(e *Engine) []string {
	e.lock()
	defer e.unlock()
	var out []string
	for name, ent := range e.leases {
		sess, ttl := "", max(ent.loggedTTL, ent.ttl)
		if s := ent.sess(); s != nil {
			sess, ttl = s.id, 0 // its session's TTL is what counts
		}
		out = append(out, fmt.Sprintf("%q owner=%q token=%d logged=%s acquired=%d held=%t tomb=%t req=%q data=%q sess=%q due=%t same=%t",
			name, ent.owner, ent.token, ttl, ent.acquired, ent.held, ent.tomb, ent.reqID(), ent.data(), sess,
			e.dl.has(ent), ent.name == name))
	}
	slices.Sort(out)
	var sessions []string
	for id, s := range e.sessions {
		sessions = append(sessions, fmt.Sprintf("%s ttl=%s leases=%d", id, s.ttl, len(s.leases)))
	}
	slices.Sort(sessions)
	out = append(out, sessions...)
	return append(out, fmt.Sprintf("token=%d held=%d tombs=%d deadlines=%d", e.token, e.held, e.nTombs, len(e.dl)))
}

// TestRecoveryState: a restart from a snapshot and the log after it
// brings back the state the engine had, entry by entry (owners, tokens,
// TTLs raised by renewals, request ids, data, sessions, tombstones in
// the order they were freed), however the entries are made.
func TestRecoveryState(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	e, err := OpenEngine(EngineConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.OpenSession(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var recs []leasehold.Record
	phase := func(from, to int) {
		for i := from; i < to; i++ {
			req := pxReq(fmt.Sprint("lease/", i%(to-from/2)), fmt.Sprint("owner-", i%7), time.Duration(1+i%5)*time.Minute)
			switch i % 6 {
			case 1:
				req.RequestID, req.Data = fmt.Sprint("req-", i), []byte(fmt.Sprint("data ", i))
			case 2:
				req.Session = s.ID
			}
			rec, err := e.Acquire(ctx, req)
			if err != nil {
				continue // held: a name taken twice in a phase
			}
			recs = append(recs, rec)
			switch i % 5 {
			case 0:
				if err := e.Release(ctx, rec.Name, rec.Owner, rec.Token); err != nil {
					t.Fatal(err)
				}
			case 3:
				if err := e.Renew(ctx, rec.Name, rec.Owner, rec.Token, time.Hour); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	phase(0, 3000)
	forceSnapshot(t, e)
	phase(3000, 5000)
	want := engineState(e)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e2 := openEngine(t, dir)
	got := engineState(e2)
	if !slices.Equal(got, want) {
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] {
				t.Fatalf("line %d after the restart:\n%s\nbefore it:\n%s\n(%d and %d lines)", i, got[i], want[i], len(got), len(want))
			}
		}
		t.Fatalf("%d lines after the restart, %d before it", len(got), len(want))
	}
	if len(want) < 3000 {
		t.Fatalf("only %d entries: the test made too few", len(want))
	}
}

// TestRecoveryAllocations: recovering leases from a snapshot takes far
// fewer allocations than leases (entries come from slabs, names from
// shared buffers); it took two or more a lease (the entry, its name).
func TestRecoveryAllocations(t *testing.T) {
	const n = 20_000
	src := openEngine(t, "")
	src.lock()
	for i := range n {
		ent := newEntry("alloc/" + strconv.Itoa(i))
		ent.owner, ent.token, ent.ttl, ent.held = "o", uint64(i+1), time.Hour, true
		src.leases[ent.name] = ent
		src.token++
	}
	snap := src.encodeState()
	src.unlock()
	allocs := testing.AllocsPerRun(3, func() {
		e := &Engine{leases: map[string]*engEntry{}, sessions: map[string]*engSession{}, clk: src.clk, base: src.base, cfg: src.cfg}
		rc := newRecovery(e)
		if err := rc.load(bytes.NewReader(snap)); err != nil {
			t.Fatal(err)
		}
		rc.finish()
		if e.held != n {
			t.Fatalf("%d held, want %d", e.held, n)
		}
	})
	if allocs > n/10 {
		t.Fatalf("%.0f allocations to recover %d leases, want at most %d", allocs, n, n/10)
	}
}

// TestSnapshotInsertedAside: with a second processor, a snapshot's
// entries are put in the lease map by a goroutine of their own while the
// records after them are decoded; records that look the map up in the
// middle of it (a release of an entry not just granted, a TTL record, a
// name granted twice) find what came before them, and the state is the
// one recovered on one processor.
func TestSnapshotInsertedAside(t *testing.T) {
	var snap []byte
	put := func(rec []byte) {
		snap = binary.AppendUvarint(snap, uint64(len(rec)))
		snap = append(snap, rec...)
	}
	grant := func(name string, token uint64) {
		ent := newEntry(name)
		ent.owner, ent.token, ent.ttl = fmt.Sprint("o", token%3), token, time.Minute
		put(encodeGrant(ent))
	}
	token := uint64(0)
	put(binary.AppendUvarint(encodeToken(1e6), 9000))
	for i := range 3000 {
		token++
		grant(fmt.Sprint("n/", i), token)
	}
	for i := range 3 { // each waits for the 3,000 grants before it to be in the map
		token++
		grant(fmt.Sprint("n/", 10+i), token) // granted again: the later grant wins
		put(encodeRelease(&engEntry{name: fmt.Sprint("n/", 20+i), token: uint64(21 + i)}))
		ttl := &engEntry{name: fmt.Sprint("n/", 30+i), token: uint64(31 + i), loggedTTL: time.Hour}
		put(encodeTTL(ttl))
		for j := range 2000 {
			token++
			grant(fmt.Sprint("m/", i, "/", j), token)
		}
	}
	put(encodeRelease(&engEntry{name: "n/40", token: 41})) // a tombstone at the end
	recoverState := func(procs int) []string {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		e := openEngine(t, "")
		if err := recoverFrom(e, bytes.NewReader(snap)); err != nil {
			t.Fatal(err)
		}
		return engineState(e)
	}
	one, two := recoverState(1), recoverState(2)
	if !slices.Equal(one, two) {
		t.Fatalf("recovered on two processors: %d lines, on one: %d, or different", len(two), len(one))
	}
	want := "token=1000000 held=8996 tombs=4 deadlines=8996"
	if got := two[len(two)-1]; got != want {
		t.Fatalf("%s, want %s", got, want)
	}
	for i, line := range two {
		if strings.HasPrefix(line, `"n/10" `) && !strings.Contains(line, "token=3001 ") ||
			strings.HasPrefix(line, `"n/30" `) && !strings.Contains(line, "logged=1h0m0s") {
			t.Fatalf("line %d: %s", i, line)
		}
	}
}

// BenchmarkRestart reopens an engine whose snapshot holds
// $LEASEHOLD_RESTART_LEASES held leases (default 100,000): OpenEngine's
// time, the collections during it, and the live heap a lease takes
// after it (collected once the restart is timed).
//
//	LEASEHOLD_RESTART_LEASES=10000000 go test -run '^$' -bench BenchmarkRestart -benchtime 3x ./server/
func BenchmarkRestart(b *testing.B) {
	n := 100_000
	if s := os.Getenv("LEASEHOLD_RESTART_LEASES"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			b.Fatal(err)
		}
	}
	dir := fillSnapshot(b, n)
	var gcs uint32
	var heap uint64
	for b.Loop() {
		b.StopTimer()
		runtime.GC()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		b.StartTimer()
		e, err := OpenEngine(EngineConfig{Dir: dir})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		runtime.ReadMemStats(&m1)
		gcs += m1.NumGC - m0.NumGC
		if st := e.Stats(); st.Held != n {
			b.Fatalf("%d held after the restart, want %d", st.Held, n)
		}
		runtime.GC()
		runtime.ReadMemStats(&m1)
		heap += m1.HeapAlloc - min(m0.HeapAlloc, m1.HeapAlloc)
		if err := e.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(gcs)/float64(b.N), "gcs/op")
	b.ReportMetric(float64(heap)/float64(b.N)/float64(n), "B/lease")
}
