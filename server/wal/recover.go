package wal

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// recover loads the newest intact snapshot, replays the segments after it,
// trims a torn tail off the newest segment and opens the segment new
// records go to. It runs in Open, before the committer starts.
func (l *Log) recover(load func(io.Reader) error, apply func([]byte) error) error {
	dir := l.opts.Dir
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var segs, snaps []uint64
	for _, e := range ents {
		name := e.Name()
		if seq, ok := parseName(name, segmentPrefix); ok {
			segs = append(segs, seq)
		} else if seq, ok := parseName(name, snapshotPrefix); ok {
			snaps = append(snaps, seq)
		} else if strings.HasPrefix(name, snapshotPrefix) && strings.HasSuffix(name, tmpSuffix) {
			// An unfinished snapshot.
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				return err
			}
		}
	}
	slices.Sort(segs)
	slices.Sort(snaps)
	if err := l.spares.adopt(); err != nil {
		return err
	}

	snapSeq, err := loadSnapshot(dir, snaps, load)
	if err != nil {
		return err
	}
	first := max(snapSeq, 1) // the first segment to replay
	i, _ := slices.BinarySearch(segs, first)
	segs = segs[i:] // older ones are superseded by the snapshot
	for j, seq := range segs {
		if seq != first+uint64(j) {
			return fmt.Errorf("%w: segment %s missing", ErrCorrupt, segmentName(first+uint64(j)))
		}
	}

	if apply == nil {
		apply = func([]byte) error { return nil }
	}
	reuse := false
	for j, seq := range segs {
		last := j == len(segs)-1
		res, size, err := l.replay(seq, apply)
		if err != nil {
			return err
		}
		l.appended += res.end
		switch {
		case !res.clean && !last:
			return fmt.Errorf("%w: %s: %s at offset %d", ErrCorrupt, segmentName(seq), res.why, res.end)
		case !res.clean:
			// A write torn by a crash: no record after res.end was ever
			// reported durable. Cut it off, so that this segment ends
			// cleanly once it is no longer the newest.
			if err := l.truncate(seq, res.end); err != nil {
				return err
			}
		case last && res.records == 0 && size == l.opts.SegmentSize:
			reuse = true // unused: it becomes the active segment again
		}
	}

	l.snapSeq = snapSeq
	switch {
	case reuse:
		l.fseq = segs[len(segs)-1]
		l.f, err = os.OpenFile(filepath.Join(dir, segmentName(l.fseq)), os.O_RDWR, 0)
	case len(segs) > 0:
		l.fseq = segs[len(segs)-1] + 1
		l.f, err = l.newSegment(l.fseq)
	default:
		l.fseq = first
		l.f, err = l.newSegment(l.fseq)
	}
	if err != nil {
		return err
	}
	l.seq = l.fseq
	l.segStart[l.seq] = l.appended
	if snapSeq > 0 {
		// What the snapshot supersedes.
		return removeBefore(dir, snapSeq)
	}
	return nil
}

// replay calls apply with the records of segment seq and returns what it
// found and the file's size.
func (l *Log) replay(seq uint64, apply func([]byte) error) (scanResult, int64, error) {
	f, err := os.Open(filepath.Join(l.opts.Dir, segmentName(seq)))
	if err != nil {
		return scanResult{}, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return scanResult{}, 0, err
	}
	res, err := scanSegment(f, apply)
	if err != nil {
		return res, 0, fmt.Errorf("wal: replaying %s: %w", segmentName(seq), err)
	}
	return res, fi.Size(), nil
}

// truncate cuts segment seq at size and makes that durable.
func (l *Log) truncate(seq uint64, size int64) error {
	f, err := os.OpenFile(filepath.Join(l.opts.Dir, segmentName(seq)), os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return err
	}
	if l.opts.NoSync {
		return nil
	}
	return f.Sync()
}
