package wal

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// takeSnapshot rotates l and writes state as the snapshot of everything
// before the new segment, whose number it returns.
func takeSnapshot(t *testing.T, l *Log, state string) uint64 {
	t.Helper()
	seq, err := l.Rotate()
	if err != nil {
		t.Fatal(err)
	}
	if err := l.WriteSnapshot(seq, writeString(state)); err != nil {
		t.Fatal(err)
	}
	return seq
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
	seq = takeSnapshot(t, l, "state B")
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
			takeSnapshot(t, l, strings.Repeat("state A ", 20))
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
			seq3 := takeSnapshot(t, l, "state C")
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
	seq := takeSnapshot(t, l, "state")
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
	takeSnapshot(t, l, "state")
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
