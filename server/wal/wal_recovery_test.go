package wal

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

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
