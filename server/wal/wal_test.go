package wal

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
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
	var durable atomic.Int64 // records in the segment when the last sync ended
	setDatasync(t, func(f *os.File) error {
		// The committer does not write while it syncs, so what the file
		// holds now is what this sync made durable.
		res, err := scanSegment(io.NewSectionReader(f, 0, segSize), func([]byte) error { return nil })
		if err != nil {
			return err
		}
		if err := fdatasync(f); err != nil {
			return err
		}
		durable.Store(int64(res.records))
		return nil
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

func TestRollover(t *testing.T) {
	opts := Options{Dir: t.TempDir(), SegmentSize: 200}
	l, _ := open(t, opts)
	var want []string
	for i := range 120 {
		r := fmt.Sprintf("%03d%s", i, strings.Repeat("r", i*7%150))
		want = append(want, r)
		if i%3 == 0 {
			appendSync(t, l, r)
		} else {
			l.Append([]byte(r), nil)
		}
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	closeLog(t, l)
	segs, _ := files(t, opts.Dir)
	if len(segs) < 20 {
		t.Fatalf("segments %v: expected dozens", segs)
	}
	for _, seq := range segs {
		fi, err := os.Stat(filepath.Join(opts.Dir, segmentName(seq)))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() != opts.SegmentSize {
			t.Errorf("%s is %d bytes, want %d", segmentName(seq), fi.Size(), opts.SegmentSize)
		}
	}
	rec := reopen(t, opts)
	equal(t, "records", rec.records, want)

	// More after reopening, still across segments.
	l, _ = open(t, opts)
	more := records("more", 30)
	appendAll(t, l, more)
	closeLog(t, l)
	equal(t, "records", reopen(t, opts).records, append(want, more...))
}

// lastSegment returns the path of the newest segment holding records.
func lastSegment(t *testing.T, dir string) string {
	t.Helper()
	segs, _ := files(t, dir)
	for _, seq := range slices.Backward(segs) {
		name := filepath.Join(dir, segmentName(seq))
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !isZero(b) {
			return name
		}
	}
	t.Fatal("no segment holds records")
	return ""
}

func TestTornTail(t *testing.T) {
	recs := records("rec", 20)
	end := int64(0)
	for _, r := range recs {
		end += headerSize + int64(len(r))
	}
	lastLen := int64(headerSize + len(recs[len(recs)-1]))
	for _, tc := range []struct {
		name  string
		tear  func(f *os.File) error
		keeps int // records recovered
	}{
		{"truncated header", func(f *os.File) error { return f.Truncate(end - lastLen + 5) }, 19},
		{"truncated payload", func(f *os.File) error { return f.Truncate(end - 3) }, 19},
		{"bad checksum", func(f *os.File) error { return flip(f, end-1) }, 19},
		{"bad length", func(f *os.File) error { return flip(f, end-lastLen+3) }, 19},
		{"zeroed header", func(f *os.File) error {
			_, err := f.WriteAt(make([]byte, headerSize), end-lastLen)
			return err
		}, 19},
		{"garbage after end", func(f *os.File) error {
			_, err := f.WriteAt([]byte("garbage"), end+100)
			return err
		}, 20},
		{"torn first record", func(f *os.File) error { return f.Truncate(10) }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{Dir: t.TempDir(), SegmentSize: 4096}
			l, _ := open(t, opts)
			appendAll(t, l, recs[:10])
			appendAll(t, l, recs[10:])
			closeLog(t, l)

			f, err := os.OpenFile(lastSegment(t, opts.Dir), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.tear(f); err != nil {
				t.Fatal(err)
			}
			f.Close()

			want := recs[:tc.keeps]
			l, rec := open(t, opts)
			equal(t, "after tear", rec.records, want)
			if got, want := l.Size(), end-lastLen*int64(20-tc.keeps); tc.keeps > 0 && got != want {
				t.Errorf("Size = %d, want %d", got, want)
			}
			// The torn segment is now an older one: it must not count as
			// corrupt next time.
			more := records("more", 5)
			appendAll(t, l, more)
			closeLog(t, l)
			equal(t, "after more", reopen(t, opts).records, append(slices.Clip(want), more...))
		})
	}
}

// flip inverts the byte at off.
func flip(f *os.File, off int64) error {
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		return err
	}
	b[0] ^= 0xff
	_, err := f.WriteAt(b, off)
	return err
}

func TestCorruptOlderSegment(t *testing.T) {
	for _, tc := range []struct {
		name    string
		corrupt func(t *testing.T, dir string) error
	}{
		{"bad checksum", func(t *testing.T, dir string) error {
			return flipIn(filepath.Join(dir, segmentName(1)), 20)
		}},
		{"bad length", func(t *testing.T, dir string) error {
			return flipIn(filepath.Join(dir, segmentName(2)), 1)
		}},
		{"zeroed header", func(t *testing.T, dir string) error {
			f, err := os.OpenFile(filepath.Join(dir, segmentName(2)), os.O_RDWR, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteAt(make([]byte, headerSize), 0)
			return err
		}},
		{"truncated", func(t *testing.T, dir string) error {
			return os.Truncate(filepath.Join(dir, segmentName(1)), 30)
		}},
		{"missing", func(t *testing.T, dir string) error {
			return os.Remove(filepath.Join(dir, segmentName(2)))
		}},
		{"missing first", func(t *testing.T, dir string) error {
			return os.Remove(filepath.Join(dir, segmentName(1)))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{Dir: t.TempDir(), SegmentSize: 256}
			l, _ := open(t, opts)
			appendAll(t, l, records("rec", 40))
			closeLog(t, l)
			if segs, _ := files(t, opts.Dir); len(segs) < 4 {
				t.Fatalf("segments %v: want at least 4", segs)
			}
			if err := tc.corrupt(t, opts.Dir); err != nil {
				t.Fatal(err)
			}
			l, _, err := tryOpen(opts)
			if !errors.Is(err, ErrCorrupt) {
				if l != nil {
					l.Close()
				}
				t.Fatalf("Open = %v, want ErrCorrupt", err)
			}
			t.Log(err)
		})
	}
}

func flipIn(name string, off int64) error {
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return flip(f, off)
}

func writeString(s string) func(w io.Writer) error {
	return func(w io.Writer) error {
		_, err := io.WriteString(w, s)
		return err
	}
}

func TestSnapshot(t *testing.T) {
	opts := Options{Dir: t.TempDir(), SegmentSize: 512}
	l, _ := open(t, opts)
	before := records("before", 40)
	appendAll(t, l, before)
	seq, err := l.Rotate()
	if err != nil {
		t.Fatal(err)
	}
	if seq2, err := l.Rotate(); err != nil || seq2 != seq {
		t.Errorf("second Rotate with nothing appended = %d, %v; want %d", seq2, err, seq)
	}
	after := records("after", 10)
	for _, r := range after[:5] {
		l.Append([]byte(r), nil) // concurrently with the snapshot
	}
	if err := l.WriteSnapshot(seq, writeString("state A")); err != nil {
		t.Fatal(err)
	}
	appendAll(t, l, after[5:])
	var afterSize int64
	for _, r := range after {
		afterSize += headerSize + int64(len(r))
	}
	if got := l.Size(); got != afterSize {
		t.Errorf("Size after snapshot = %d, want %d", got, afterSize)
	}
	closeLog(t, l)

	segs, snaps := files(t, opts.Dir)
	if !slices.Equal(snaps, []uint64{seq}) || segs[0] != seq {
		t.Errorf("after snapshot %d: segments %v, snapshots %v", seq, segs, snaps)
	}
	l, rec := open(t, opts)
	if string(rec.snapshot) != "state A" {
		t.Errorf("snapshot %q, want %q", rec.snapshot, "state A")
	}
	equal(t, "records after snapshot", rec.records, after)
	if got := l.Size(); got != afterSize {
		t.Errorf("Size after reopen = %d, want %d", got, afterSize)
	}

	// A second snapshot, then one the process died writing.
	seq, err = l.Rotate()
	if err != nil {
		t.Fatal(err)
	}
	if err := l.WriteSnapshot(seq, writeString("state B")); err != nil {
		t.Fatal(err)
	}
	last := records("last", 5)
	appendAll(t, l, last)
	closeLog(t, l)
	tmp := filepath.Join(opts.Dir, snapshotName(seq+1)+tmpSuffix)
	if err := os.WriteFile(tmp, []byte("half a snap"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, rec = open(t, opts)
	if string(rec.snapshot) != "state B" {
		t.Errorf("snapshot %q, want %q", rec.snapshot, "state B")
	}
	equal(t, "records after second snapshot", rec.records, last)
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("unfinished snapshot left behind: %v", err)
	}
	if got := l.Size(); got == 0 {
		t.Error("Size = 0 after replaying records")
	}
	if err := l.WriteSnapshot(seq-1, writeString("old")); err == nil {
		t.Error("WriteSnapshot of a superseded sequence number succeeded")
	}
	closeLog(t, l)
}

// TestTornSnapshot checks that a snapshot that is torn or corrupt is
// ignored in favour of the previous one and the segments after it.
func TestTornSnapshot(t *testing.T) {
	for _, tc := range []struct {
		name string
		tear func(name string) error
	}{
		{"truncated", func(name string) error { return os.Truncate(name, 40) }},
		{"header only", func(name string) error { return os.Truncate(name, snapHeaderSize) }},
		{"empty", func(name string) error { return os.Truncate(name, 0) }},
		{"bad content", func(name string) error { return flipIn(name, snapHeaderSize+3) }},
		{"bad header", func(name string) error { return flipIn(name, 17) }},
		{"extended", func(name string) error {
			f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.Write([]byte{0})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{Dir: t.TempDir(), SegmentSize: 512}
			l, _ := open(t, opts)
			appendAll(t, l, records("a", 20))
			seq1, err := l.Rotate()
			if err != nil {
				t.Fatal(err)
			}
			if err := l.WriteSnapshot(seq1, writeString(strings.Repeat("state A ", 20))); err != nil {
				t.Fatal(err)
			}
			b := records("b", 20)
			appendAll(t, l, b)
			seq2, err := l.Rotate()
			if err != nil {
				t.Fatal(err)
			}
			c := records("c", 3)
			appendAll(t, l, c)
			closeLog(t, l)

			// The second snapshot, written as the process died: its
			// segments were not yet deleted.
			name := filepath.Join(opts.Dir, snapshotName(seq2))
			if err := writeSnapshotFile(name, seq2, writeString(strings.Repeat("state B ", 20)), false); err != nil {
				t.Fatal(err)
			}
			if err := tc.tear(name); err != nil {
				t.Fatal(err)
			}
			l, rec := open(t, opts)
			if want := strings.Repeat("state A ", 20); string(rec.snapshot) != want {
				t.Errorf("snapshot %q, want %q", rec.snapshot, want)
			}
			equal(t, "records", rec.records, append(b, c...))

			// Snapshotting again replaces the bad file.
			seq3, err := l.Rotate()
			if err != nil {
				t.Fatal(err)
			}
			if err := l.WriteSnapshot(seq3, writeString("state C")); err != nil {
				t.Fatal(err)
			}
			closeLog(t, l)
			rec = reopen(t, opts)
			if string(rec.snapshot) != "state C" || len(rec.records) != 0 {
				t.Errorf("after new snapshot: %q and %d records", rec.snapshot, len(rec.records))
			}
			if _, snaps := files(t, opts.Dir); !slices.Equal(snaps, []uint64{seq3}) {
				t.Errorf("snapshots %v, want [%d]", snaps, seq3)
			}
		})
	}
}

// TestTornSnapshotAfterCleanup checks that when the newest snapshot is bad
// and the segments needed to go without it are gone, Open fails rather
// than recovering less than it should.
func TestTornSnapshotAfterCleanup(t *testing.T) {
	opts := Options{Dir: t.TempDir(), SegmentSize: 512}
	l, _ := open(t, opts)
	appendAll(t, l, records("a", 20))
	seq, err := l.Rotate()
	if err != nil {
		t.Fatal(err)
	}
	if err := l.WriteSnapshot(seq, writeString("state")); err != nil {
		t.Fatal(err)
	}
	closeLog(t, l)
	if err := flipIn(filepath.Join(opts.Dir, snapshotName(seq)), snapHeaderSize); err != nil {
		t.Fatal(err)
	}
	if l, _, err := tryOpen(opts); !errors.Is(err, ErrCorrupt) {
		if l != nil {
			l.Close()
		}
		t.Fatalf("Open = %v, want ErrCorrupt", err)
	}
}

func TestLoadApplyErrors(t *testing.T) {
	opts := Options{Dir: t.TempDir(), SegmentSize: 512}
	l, _ := open(t, opts)
	appendAll(t, l, records("a", 3))
	seq, _ := l.Rotate()
	if err := l.WriteSnapshot(seq, writeString("state")); err != nil {
		t.Fatal(err)
	}
	appendAll(t, l, records("b", 3))
	closeLog(t, l)

	boom := errors.New("boom")
	if _, err := Open(opts, func(io.Reader) error { return boom }, nil); !errors.Is(err, boom) {
		t.Errorf("Open with failing load = %v", err)
	}
	if _, err := Open(opts, nil, func([]byte) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("Open with failing apply = %v", err)
	}
	// Nothing was changed, and the lock was released.
	rec := reopen(t, opts)
	equal(t, "records", rec.records, records("b", 3))
}

func TestClosed(t *testing.T) {
	opts := Options{Dir: t.TempDir(), SegmentSize: 4096}
	l, _ := open(t, opts)
	l.Append([]byte("pending"), nil) // Close syncs it
	closeLog(t, l)
	if err := appendWait(l, []byte("x")); err != ErrClosed {
		t.Errorf("Append after Close: %v", err)
	}
	l.Append([]byte("x"), nil) // must not panic
	if err := l.Sync(); err != ErrClosed {
		t.Errorf("Sync after Close: %v", err)
	}
	if _, err := l.Rotate(); err != ErrClosed {
		t.Errorf("Rotate after Close: %v", err)
	}
	if err := l.WriteSnapshot(1, writeString("")); err != ErrClosed {
		t.Errorf("WriteSnapshot after Close: %v", err)
	}
	if err := l.Close(); err != ErrClosed {
		t.Errorf("second Close: %v", err)
	}
	equal(t, "records", reopen(t, opts).records, []string{"pending"})
}

func TestLocked(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the directory is locked on Linux only")
	}
	opts := Options{Dir: t.TempDir(), SegmentSize: 4096}
	l, _ := open(t, opts)
	if l2, _, err := tryOpen(opts); err == nil {
		l2.Close()
		t.Fatal("second Open of one directory succeeded")
	}
	closeLog(t, l)
	reopen(t, opts)
}

// TestCrash runs a child process that appends from many goroutines, takes
// snapshots, and prints each record as its done reports it durable; the
// parent kills it with SIGKILL part way through, then checks that every
// record the child saw acknowledged is recovered. It repeats this, so
// later rounds recover logs that earlier rounds left torn.
func TestCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	acked := make(map[string]bool)
	for round := range 4 {
		cmd := exec.Command(exe, "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), "WAL_CRASH_DIR="+dir, "WAL_CRASH_ROUND="+strconv.Itoa(round))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		n, killed := 0, false
		var other []string
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			id, ok := strings.CutPrefix(sc.Text(), "ack ")
			if !ok {
				other = append(other, sc.Text())
				continue
			}
			acked[id] = true
			n++
			// Kill at a different point each round.
			if !killed && n >= 1500+700*round {
				cmd.Process.Kill()
				killed = true
			}
		}
		err = cmd.Wait()
		if !killed {
			t.Fatalf("round %d: child ended by itself (%v) after %d acks\n%s\n%s", round, err, n, strings.Join(other, "\n"), stderr.Bytes())
		}

		state := make(map[string]bool)
		l, err := Open(Options{Dir: dir, SegmentSize: crashSegmentSize},
			func(r io.Reader) error { return readState(r, state) },
			func(rec []byte) error { state[string(rec)] = true; return nil })
		if err != nil {
			t.Fatalf("round %d: Open after kill: %v", round, err)
		}
		closeLog(t, l)
		missing := 0
		for id := range acked {
			if !state[id] {
				if missing < 10 {
					t.Errorf("round %d: acknowledged record %s lost", round, id)
				}
				missing++
			}
		}
		if missing > 0 {
			t.Fatalf("round %d: %d of %d acknowledged records lost", round, missing, len(acked))
		}
		segs, snaps := files(t, dir)
		t.Logf("round %d: %d acks, %d records recovered, segments %v, snapshots %v", round, n, len(state), segs, snaps)
	}
}

const crashSegmentSize = 16 << 10

func readState(r io.Reader, state map[string]bool) error {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		state[sc.Text()] = true
	}
	return sc.Err()
}

// TestCrashChild is TestCrash's child process. It behaves like the
// server: state changes and Appends happen under one mutex, and a
// snapshot copies the state under it right after Rotate.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv("WAL_CRASH_DIR")
	if dir == "" {
		t.Skip("run by TestCrash")
	}
	round := os.Getenv("WAL_CRASH_ROUND")
	var mu sync.Mutex
	state := make(map[string]bool)
	l, err := Open(Options{Dir: dir, SegmentSize: crashSegmentSize},
		func(r io.Reader) error { return readState(r, state) },
		func(rec []byte) error { state[string(rec)] = true; return nil })
	if err != nil {
		t.Fatal(err)
	}

	snap := make(chan struct{}, 1)
	go func() {
		for range snap {
			mu.Lock()
			seq, err := l.Rotate()
			if err != nil {
				panic(err)
			}
			var buf bytes.Buffer
			for id := range state {
				buf.WriteString(id + "\n")
			}
			mu.Unlock()
			if err := l.WriteSnapshot(seq, func(w io.Writer) error {
				_, err := buf.WriteTo(w)
				return err
			}); err != nil {
				panic(err)
			}
		}
	}()

	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ch := make(chan error, 1)
			for i := range 1_000_000 {
				id := fmt.Sprintf("r%s-g%02d-%07d", round, g, i)
				mu.Lock()
				state[id] = true
				l.Append([]byte(id), func(err error) {
					if err == nil {
						os.Stdout.WriteString("ack " + id + "\n")
					}
					ch <- err
				})
				mu.Unlock()
				if err := <-ch; err != nil {
					panic(err)
				}
				if g == 0 && i%40 == 39 {
					select {
					case snap <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
	wg.Wait()
	t.Error("not killed")
}

func BenchmarkAppend(b *testing.B) {
	for _, bc := range []struct {
		name   string
		noSync bool
	}{{"durable", false}, {"nosync", true}} {
		for _, par := range []int{4, 16, 64} { // goroutines per CPU
			b.Run(fmt.Sprintf("%s/g=%d", bc.name, par*runtime.GOMAXPROCS(0)), func(b *testing.B) {
				var syncs, syncTime atomic.Int64
				l, _ := open(b, Options{
					Dir:    b.TempDir(),
					NoSync: bc.noSync,
					OnSync: func(d time.Duration, _ int) { syncs.Add(1); syncTime.Add(int64(d)) },
				})
				defer l.Close()
				rec := bytes.Repeat([]byte("r"), 100)
				b.SetParallelism(par)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					ch := make(chan error, 1)
					done := func(err error) { ch <- err }
					for pb.Next() {
						l.Append(rec, done)
						if err := <-ch; err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
				commits := float64(max(syncs.Load(), 1))
				b.ReportMetric(float64(b.N)/commits, "records/commit")
				b.ReportMetric(float64(syncTime.Load())/commits/1e3, "µs/commit")
			})
		}
	}
}

// BenchmarkOpen measures recovery: replaying a log of 100-byte records.
func BenchmarkOpen(b *testing.B) {
	const n = 500_000
	opts := Options{Dir: b.TempDir()}
	l, _ := open(b, opts)
	rec := bytes.Repeat([]byte("r"), 100)
	for range n {
		l.Append(rec, nil)
	}
	if err := l.Sync(); err != nil {
		b.Fatal(err)
	}
	closeLog(b, l)
	b.ResetTimer()
	for b.Loop() {
		count := 0
		l, err := Open(opts, nil, func([]byte) error { count++; return nil })
		if err != nil {
			b.Fatal(err)
		}
		if count != n {
			b.Fatalf("replayed %d records, want %d", count, n)
		}
		b.StopTimer()
		closeLog(b, l)
		b.StartTimer()
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}
