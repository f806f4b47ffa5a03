package wal

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
)

// A snapshot file is a header followed by the content written by
// WriteSnapshot's write function:
//
//	magic  [8]byte "LHWSNAP1"
//	seq    uint64  the snapshot covers the segments below seq
//	size   uint64  content length
//	crc    uint32  CRC-32C of the content
//	hcrc   uint32  CRC-32C of the 28 bytes above
//
// all little-endian.
const (
	snapMagic      = "LHWSNAP1"
	snapHeaderSize = 32
)

// errBadSnapshot marks a snapshot file that is torn or corrupt.
var errBadSnapshot = errors.New("bad snapshot")

func encodeSnapHeader(seq, size uint64, crc uint32) []byte {
	h := make([]byte, 0, snapHeaderSize)
	h = append(h, snapMagic...)
	h = binary.LittleEndian.AppendUint64(h, seq)
	h = binary.LittleEndian.AppendUint64(h, size)
	h = binary.LittleEndian.AppendUint32(h, crc)
	return binary.LittleEndian.AppendUint32(h, crc32.Checksum(h, castagnoli))
}

// countingWriter passes writes to w, counting them and hashing them.
// With pace set (w's file, written from offset base on), every
// spareWriteBack bytes written are written back to the disk before more
// are (spareFlush), as a spare segment's zeros are: a large snapshot left
// to its final sync made the log's group commits wait behind all of it.
type countingWriter struct {
	w    io.Writer
	crc  hash.Hash32
	size uint64

	pace    *os.File
	base    int64
	flushed uint64 // bytes from base on already written back
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.crc.Write(p[:n])
	c.size += uint64(n)
	if err == nil && c.pace != nil && c.size-c.flushed >= spareWriteBack {
		if err := spareFlush(c.pace, c.base+int64(c.flushed), int64(c.size-c.flushed)); err != nil {
			return n, err
		}
		c.flushed = c.size
	}
	return n, err
}

// writeSnapshotFile writes a complete snapshot file at name, synced unless
// noSync.
func writeSnapshotFile(name string, seq uint64, write func(w io.Writer) error, noSync bool) (err error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	if _, err := f.Seek(snapHeaderSize, io.SeekStart); err != nil {
		return err
	}
	cw := &countingWriter{w: f, crc: crc32.New(castagnoli), base: snapHeaderSize}
	if !noSync {
		cw.pace = f
	}
	bw := bufio.NewWriterSize(cw, 256<<10)
	if err := write(bw); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if _, err := f.WriteAt(encodeSnapHeader(seq, cw.size, cw.crc.Sum32()), 0); err != nil {
		return err
	}
	if noSync {
		return nil
	}
	return f.Sync()
}

// checkSnapshotFile verifies f's header and content against seq; on
// success f is positioned at the start of the content, and its size is
// returned. A torn or corrupt file yields errBadSnapshot.
func checkSnapshotFile(f *os.File, seq uint64) (int64, error) {
	var h [snapHeaderSize]byte
	if _, err := io.ReadFull(f, h[:]); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return 0, fmt.Errorf("%w: short header", errBadSnapshot)
		}
		return 0, err
	}
	if string(h[:8]) != snapMagic ||
		binary.LittleEndian.Uint32(h[28:]) != crc32.Checksum(h[:28], castagnoli) {
		return 0, fmt.Errorf("%w: bad header", errBadSnapshot)
	}
	if got := binary.LittleEndian.Uint64(h[8:]); got != seq {
		return 0, fmt.Errorf("%w: header says %d", errBadSnapshot, got)
	}
	size := binary.LittleEndian.Uint64(h[16:])
	crc := binary.LittleEndian.Uint32(h[24:])
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if uint64(fi.Size()) != snapHeaderSize+size {
		return 0, fmt.Errorf("%w: %d bytes, header says %d", errBadSnapshot, fi.Size(), snapHeaderSize+size)
	}
	sum := crc32.New(castagnoli)
	if _, err := io.Copy(sum, io.NewSectionReader(f, snapHeaderSize, int64(size))); err != nil {
		return 0, err
	}
	if sum.Sum32() != crc {
		return 0, fmt.Errorf("%w: bad checksum", errBadSnapshot)
	}
	if _, err := f.Seek(snapHeaderSize, io.SeekStart); err != nil {
		return 0, err
	}
	return int64(size), nil
}

// loadSnapshot tries the snapshots in seqs, newest first, and calls load
// with the content of the first intact one. It returns that snapshot's
// sequence number, or 0 if none is intact.
func loadSnapshot(dir string, seqs []uint64, load func(io.Reader) error) (uint64, error) {
	for _, seq := range slices.Backward(seqs) {
		ok, err := loadSnapshotFile(filepath.Join(dir, snapshotName(seq)), seq, load)
		if err != nil {
			return 0, err
		}
		if ok {
			return seq, nil
		}
	}
	return 0, nil
}

func loadSnapshotFile(name string, seq uint64, load func(io.Reader) error) (bool, error) {
	f, err := os.Open(name)
	if err != nil {
		return false, err
	}
	defer f.Close()
	size, err := checkSnapshotFile(f, seq)
	if errors.Is(err, errBadSnapshot) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if load == nil {
		return true, nil
	}
	if err := load(bufio.NewReaderSize(io.LimitReader(f, size), 256<<10)); err != nil {
		return false, fmt.Errorf("wal: loading %s: %w", filepath.Base(name), err)
	}
	return true, nil
}

// WriteSnapshot writes a snapshot covering every record in the segments
// below seq, which Rotate returned: write is called once to fill it. The
// file is written under a temporary name and synced; once every record
// below seq is durable too, it is renamed into place and the directory
// synced. Then the segments and snapshots it supersedes are deleted. If
// WriteSnapshot fails, or the process dies before it returns, the previous
// snapshot and the segments after it still hold the log.
//
// WriteSnapshot may run concurrently with Append and Rotate; calls to it
// are serialised. Since it waits for the log's goroutine, it must not be
// called while holding a lock that a done callback takes.
func (l *Log) WriteSnapshot(seq uint64, write func(w io.Writer) error) error {
	l.snapMu.Lock()
	defer l.snapMu.Unlock()
	l.mu.Lock()
	closed, snapSeq, cur := l.closed, l.snapSeq, l.seq
	_, known := l.segStart[seq]
	l.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if seq < snapSeq || seq > cur || !known {
		return fmt.Errorf("wal: snapshot %d: not a segment returned by Rotate since the last snapshot (%d)", seq, snapSeq)
	}

	name := filepath.Join(l.opts.Dir, snapshotName(seq))
	tmp := name + tmpSuffix
	if err := writeSnapshotFile(tmp, seq, write, l.opts.NoSync); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := l.barrier(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, name); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := l.syncDir(); err != nil {
		return err
	}

	l.mu.Lock()
	l.snapSeq = seq
	l.base = l.segStart[seq]
	for s := range l.segStart {
		if s < seq {
			delete(l.segStart, s)
		}
	}
	l.mu.Unlock()
	return removeBefore(l.opts.Dir, seq)
}

// removeBefore deletes the segments and snapshots below seq. Their
// removal need not be durable: Open ignores what the newest snapshot
// supersedes.
func removeBefore(dir string, seq uint64) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		s, ok := parseName(e.Name(), segmentPrefix)
		if !ok {
			s, ok = parseName(e.Name(), snapshotPrefix)
		}
		if ok && s < seq {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
