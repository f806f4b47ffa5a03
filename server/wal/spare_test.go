package wal

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestSpareWrittenBackInSteps checks that a spare's zeros are written back
// to the disk a MiB at a time while it is prepared, in order and covering
// the whole file, rather than all at once by its final sync (which made
// the log's group commits wait behind a whole segment's writeback), and
// that the spare is whole and zero.
func TestSpareWrittenBackInSteps(t *testing.T) {
	got := recordWriteBacks(t)

	const size = 3<<20 + 256<<10 // three and a quarter MiB
	s := &spares{dir: t.TempDir(), size: size}
	f, err := s.prepare()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := []span{{0, 1 << 20}, {1 << 20, 1 << 20}, {2 << 20, 1 << 20}, {3 << 20, 256 << 10}}
	if len(*got) != len(want) {
		t.Fatalf("written back as %v, want %v", *got, want)
	}
	for i := range want {
		if (*got)[i] != want[i] {
			t.Fatalf("written back as %v, want %v", *got, want)
		}
	}
	fi, err := f.Stat()
	if err != nil || fi.Size() != size {
		t.Fatalf("spare size %v (%v), want %d", fi.Size(), err, size)
	}
	if ok, err := zeroToEOF(f); err != nil || !ok {
		t.Fatalf("spare not all zeros: %v %v", ok, err)
	}

	// Without fsync (NoSync, tests and benchmarks) nothing is written back.
	*got = nil
	ns := &spares{dir: t.TempDir(), size: size, noSync: true}
	g, err := ns.prepare()
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
	if len(*got) != 0 {
		t.Fatalf("NoSync spare written back: %v", *got)
	}
}

// TestSnapshotWrittenBackInSteps checks the same for a snapshot file: its
// content goes to the disk a MiB at a time as it is written, in order from
// the end of its header, and the file still checks out whole.
func TestSnapshotWrittenBackInSteps(t *testing.T) {
	got := recordWriteBacks(t)

	name := filepath.Join(t.TempDir(), "snap")
	const size = 3<<20 + 100
	err := writeSnapshotFile(name, 7, func(w io.Writer) error {
		chunk := bytes.Repeat([]byte{0xab}, 1000)
		for written := 0; written < size; written += len(chunk) {
			if _, err := w.Write(chunk[:min(len(chunk), size-written)]); err != nil {
				return err
			}
		}
		return nil
	}, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(*got) < 3 {
		t.Fatalf("written back as %v, want at least 3 steps of a MiB", *got)
	}
	next := int64(snapHeaderSize)
	for _, sp := range *got {
		if sp.off != next || sp.n < spareWriteBack {
			t.Fatalf("written back as %v: want contiguous steps of at least %d from %d", *got, spareWriteBack, snapHeaderSize)
		}
		next += sp.n
	}
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n, err := checkSnapshotFile(f, 7); err != nil || n != size {
		t.Fatalf("snapshot check: size %d, %v; want %d", n, err, size)
	}
}

type span struct{ off, n int64 }

// recordWriteBacks records every spareFlush call for the test's duration
// (the calls still write back).
func recordWriteBacks(t *testing.T) *[]span {
	var got []span
	old := spareFlush
	spareFlush = func(f *os.File, off, n int64) error {
		got = append(got, span{off, n})
		return old(f, off, n)
	}
	t.Cleanup(func() { spareFlush = old })
	return &got
}
