package wal

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// recovered is what Open handed to load and apply.
type recovered struct {
	snapshot []byte // nil if load was not called
	records  []string
}

func open(t testing.TB, opts Options) (*Log, *recovered) {
	t.Helper()
	l, rec, err := tryOpen(opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l, rec
}

func tryOpen(opts Options) (*Log, *recovered, error) {
	rec := new(recovered)
	load := func(r io.Reader) error {
		b, err := io.ReadAll(r)
		rec.snapshot = b
		return err
	}
	apply := func(b []byte) error {
		rec.records = append(rec.records, string(b))
		return nil
	}
	l, err := Open(opts, load, apply)
	return l, rec, err
}

// reopen opens the log in opts.Dir, closes it and returns what it held.
func reopen(t testing.TB, opts Options) *recovered {
	t.Helper()
	l, rec := open(t, opts)
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return rec
}

// appendSync appends rec and waits for it to be durable.
func appendSync(t testing.TB, l *Log, rec string) {
	t.Helper()
	if err := appendWait(l, []byte(rec)); err != nil {
		t.Fatalf("Append(%q): %v", rec, err)
	}
}

func appendWait(l *Log, rec []byte) error {
	ch := make(chan error, 1)
	l.Append(rec, func(err error) { ch <- err })
	return <-ch
}

func appendAll(t testing.TB, l *Log, recs []string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(recs))
	for i, r := range recs {
		wg.Add(1)
		l.Append([]byte(r), func(err error) { errs[i] = err; wg.Done() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

func closeLog(t testing.TB, l *Log) {
	t.Helper()
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func records(prefix string, n int) []string {
	recs := make([]string, n)
	for i := range recs {
		recs[i] = fmt.Sprintf("%s-%04d-%s", prefix, i, strings.Repeat("x", i%23))
	}
	return recs
}

func equal(t testing.TB, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: got %d records, want %d\ngot  %q\nwant %q", what, len(got), len(want), got, want)
	}
}

// files returns the sequence numbers of the segments and snapshots in dir.
func files(t testing.TB, dir string) (segs, snaps []uint64) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if seq, ok := parseName(e.Name(), segmentPrefix); ok {
			segs = append(segs, seq)
		}
		if seq, ok := parseName(e.Name(), snapshotPrefix); ok {
			snaps = append(snaps, seq)
		}
	}
	return segs, snaps
}

func TestEmpty(t *testing.T) {
	opts := Options{Dir: filepath.Join(t.TempDir(), "new", "log"), SegmentSize: 4096}
	l, rec := open(t, opts)
	if rec.snapshot != nil || len(rec.records) != 0 {
		t.Fatalf("new log recovered %+v", rec)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if n := l.Size(); n != 0 {
		t.Errorf("Size = %d, want 0", n)
	}
	closeLog(t, l)
	fi, err := os.Stat(opts.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("directory mode %v, want 0700", fi.Mode().Perm())
	}
	// Opening without appending reuses the unused segment rather than
	// leaving a new one behind each time.
	for range 3 {
		reopen(t, opts)
	}
	if segs, _ := files(t, opts.Dir); len(segs) != 1 {
		t.Errorf("segments after empty reopens: %v, want one", segs)
	}
}

// TestConcurrentAppend appends from many goroutines and checks that every
// done reports success in each goroutine's order, and that reopening
// replays every record, in an order consistent with each goroutine's.
func TestConcurrentAppend(t *testing.T) {
	const goroutines, perG = 16, 300
	opts := Options{Dir: t.TempDir(), SegmentSize: 32 << 10} // rolls over a few times
	var syncs, synced atomic.Int64
	opts.OnSync = func(_ time.Duration, n int) { syncs.Add(1); synced.Add(int64(n)) }
	l, _ := open(t, opts)

	var wg sync.WaitGroup
	errc := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var next atomic.Int64 // index of the next done expected
			var inner sync.WaitGroup
			for i := range perG {
				inner.Add(1)
				rec := fmt.Sprintf("g%02d %05d %s", g, i, strings.Repeat("p", (g*7+i)%50))
				l.Append([]byte(rec), func(err error) {
					defer inner.Done()
					if err != nil {
						errc <- fmt.Errorf("%s: %v", rec, err)
					} else if got := next.Add(1) - 1; got != int64(i) {
						errc <- fmt.Errorf("g%02d: done for %d called at position %d", g, i, got)
					}
				})
				if i%10 == 0 {
					inner.Wait() // wait now and then, so batches vary
				}
			}
			inner.Wait()
		}()
	}
	wg.Wait()
	closeLog(t, l)
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if got := synced.Load(); got != goroutines*perG {
		t.Errorf("OnSync counted %d records, want %d", got, goroutines*perG)
	}
	t.Logf("%d records in %d group commits", synced.Load(), syncs.Load())

	rec := reopen(t, opts)
	if len(rec.records) != goroutines*perG {
		t.Fatalf("recovered %d records, want %d", len(rec.records), goroutines*perG)
	}
	next := make([]int, goroutines)
	for _, r := range rec.records {
		var g, i int
		if _, err := fmt.Sscanf(r, "g%02d %05d", &g, &i); err != nil {
			t.Fatalf("record %q: %v", r, err)
		}
		if i != next[g] {
			t.Fatalf("goroutine %d: record %d recovered after %d", g, i, next[g]-1)
		}
		next[g]++
	}
	if segs, _ := files(t, opts.Dir); len(segs) < 3 {
		t.Errorf("segments %v: expected several", segs)
	}
}

// TestDoneOrder checks that done callbacks run in append order, refused
// records included.
func TestDoneOrder(t *testing.T) {
	l, _ := open(t, Options{Dir: t.TempDir(), SegmentSize: 1024, NoSync: true})
	var (
		mu    sync.Mutex // serialises Append, to know the append order
		order []int
		n     int
		wg    sync.WaitGroup
	)
	big := make([]byte, 2000) // longer than a segment
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				rec := []byte("record")
				if i%17 == 0 {
					rec = big
				}
				mu.Lock()
				idx := n
				n++
				wg.Add(1)
				l.Append(rec, func(err error) {
					defer wg.Done()
					if (len(rec) == len(big)) != errors.Is(err, ErrTooLarge) {
						t.Errorf("record %d (%d bytes): %v", idx, len(rec), err)
					}
					order = append(order, idx) // done runs on one goroutine
				})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	closeLog(t, l)
	if !slices.IsSorted(order) || len(order) != n {
		t.Fatalf("done called out of order or not for every record (%d of %d)", len(order), n)
	}
}

// setDatasync replaces the function that syncs segments until the test ends.
func setDatasync(t *testing.T, f func(*os.File) error) {
	datasync = f
	t.Cleanup(func() { datasync = fdatasync })
}

// TestAckAfterSync checks that done reports a record only after a sync
// that began after the record was written.
func TestAckAfterSync(t *testing.T) {
	const segSize = 64 << 10 // one segment
	var durable atomic.Int64 // records known durable: the most any finished sync covered
	setDatasync(t, func(f *os.File) error {
		// Every record the file holds now (a record being written
		// meanwhile ends the scan) was written before this sync began,
		// so it is durable once the sync returns. Syncs may overlap and
		// end in any order: keep the largest count.
		res, err := scanSegment(io.NewSectionReader(f, 0, segSize), func([]byte) error { return nil })
		if err != nil {
			return err
		}
		if err := fdatasync(f); err != nil {
			return err
		}
		for {
			d := durable.Load()
			if int64(res.records) <= d || durable.CompareAndSwap(d, int64(res.records)) {
				return nil
			}
		}
	})
	l, _ := open(t, Options{Dir: t.TempDir(), SegmentSize: segSize})
	var (
		mu   sync.Mutex // serialises Append, to know each record's position
		n    int64
		wg   sync.WaitGroup
		errc = make(chan error, 1)
	)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				ch := make(chan struct{})
				mu.Lock()
				idx := n
				n++
				l.Append([]byte("record"), func(err error) {
					if d := durable.Load(); err != nil || idx >= d {
						select {
						case errc <- fmt.Errorf("record %d acknowledged (%v) with %d records synced", idx, err, d):
						default:
						}
					}
					close(ch)
				})
				mu.Unlock()
				<-ch
			}
		}()
	}
	wg.Wait()
	closeLog(t, l)
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
}

// TestSyncFailure checks that a failed fdatasync fails its records and
// breaks the log, and that no record acknowledged before it is lost.
func TestSyncFailure(t *testing.T) {
	boom := errors.New("injected sync failure")
	var calls atomic.Int32
	setDatasync(t, func(f *os.File) error {
		if calls.Add(1) == 5 {
			return boom
		}
		return fdatasync(f)
	})
	opts := Options{Dir: t.TempDir(), SegmentSize: 4096}
	l, _ := open(t, opts)
	var acked []string
	for i := 0; ; i++ {
		rec := fmt.Sprintf("rec %d", i)
		err := appendWait(l, []byte(rec))
		if err != nil {
			if !errors.Is(err, boom) {
				t.Fatalf("Append: %v, want the sync error", err)
			}
			break
		}
		acked = append(acked, rec)
	}
	if len(acked) != 4 {
		t.Errorf("%d records acknowledged before the failing sync, want 4", len(acked))
	}
	if err := appendWait(l, []byte("later")); !errors.Is(err, boom) {
		t.Errorf("Append after failure: %v", err)
	}
	if err := l.Sync(); !errors.Is(err, boom) {
		t.Errorf("Sync after failure: %v", err)
	}
	if _, err := l.Rotate(); !errors.Is(err, boom) {
		t.Errorf("Rotate after failure: %v", err)
	}
	if err := l.Close(); !errors.Is(err, boom) {
		t.Errorf("Close after failure: %v", err)
	}
	datasync = fdatasync
	// The failed record was written, just not known to be durable: it
	// may or may not be recovered.
	rec := reopen(t, opts)
	if len(rec.records) < len(acked) || !slices.Equal(rec.records[:len(acked)], acked) {
		t.Errorf("recovered %q, want %q first", rec.records, acked)
	}
}

func TestTooLarge(t *testing.T) {
	opts := Options{Dir: t.TempDir(), SegmentSize: 2 << 20}
	l, _ := open(t, opts)
	if err := appendWait(l, make([]byte, MaxRecordSize+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("record of MaxRecordSize+1 bytes: %v, want ErrTooLarge", err)
	}
	max := bytes.Repeat([]byte{7}, MaxRecordSize)
	if err := appendWait(l, max); err != nil {
		t.Errorf("record of MaxRecordSize bytes: %v", err)
	}
	appendSync(t, l, "after") // the log is not broken
	closeLog(t, l)
	rec := reopen(t, opts)
	equal(t, "records", rec.records, []string{string(max), "after"})
}
