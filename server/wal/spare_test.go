package wal

import (
	"os"
	"testing"
)

// TestSpareWrittenBackInSteps checks that a spare's zeros are written back
// to the disk a MiB at a time while it is prepared, in order and covering
// the whole file, rather than all at once by its final sync (which made
// the log's group commits wait behind a whole segment's writeback), and
// that the spare is whole and zero.
func TestSpareWrittenBackInSteps(t *testing.T) {
	type span struct{ off, n int64 }
	var got []span
	old := spareFlush
	spareFlush = func(f *os.File, off, n int64) error {
		got = append(got, span{off, n})
		return old(f, off, n)
	}
	t.Cleanup(func() { spareFlush = old })

	const size = 3<<20 + 256<<10 // three and a quarter MiB
	s := &spares{dir: t.TempDir(), size: size}
	f, err := s.prepare()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := []span{{0, 1 << 20}, {1 << 20, 1 << 20}, {2 << 20, 1 << 20}, {3 << 20, 256 << 10}}
	if len(got) != len(want) {
		t.Fatalf("written back as %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("written back as %v, want %v", got, want)
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
	got = nil
	ns := &spares{dir: t.TempDir(), size: size, noSync: true}
	g, err := ns.prepare()
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
	if len(got) != 0 {
		t.Fatalf("NoSync spare written back: %v", got)
	}
}
