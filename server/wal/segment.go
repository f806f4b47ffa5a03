package wal

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

const (
	segmentPrefix  = "log-"
	snapshotPrefix = "snap-"
	spareName      = "spare"
	tmpSuffix      = ".tmp"
)

func segmentName(seq uint64) string  { return fmt.Sprintf("%s%016x", segmentPrefix, seq) }
func snapshotName(seq uint64) string { return fmt.Sprintf("%s%016x", snapshotPrefix, seq) }

// parseName returns the sequence number of a file called prefix followed
// by 16 hex digits.
func parseName(name, prefix string) (uint64, bool) {
	hex, ok := strings.CutPrefix(name, prefix)
	if !ok || len(hex) != 16 {
		return 0, false
	}
	seq, err := strconv.ParseUint(hex, 16, 64)
	return seq, err == nil
}

// spareWriteBack is how many bytes of a spare's zeros are written back to
// the disk at a time while it is prepared (see prepare).
const spareWriteBack = 1 << 20

// spareFlush paces a spare's preparation (writeBack). Tests replace it.
var spareFlush = writeBack

// zeros is a block of zero bytes for filling segments and comparing.
var zeros = make([]byte, 256<<10)

func appendHeader(b []byte, length, crc uint32) []byte {
	b = binary.LittleEndian.AppendUint32(b, length)
	return binary.LittleEndian.AppendUint32(b, crc)
}

// A scanResult describes what scanSegment found in a segment.
type scanResult struct {
	end     int64 // offset just past the last good record
	records int   // good records
	// clean reports that the segment ends properly: every byte from end
	// to the end of the file is zero.
	clean bool
	// why says what follows end when the segment is not clean.
	why string
}

// scanSegment reads the records of a segment from r, calling fn with each
// payload (a new slice each time). It stops at the first record that is
// not intact. An error is returned only from fn or from reading.
func scanSegment(r io.Reader, fn func(rec []byte) error) (scanResult, error) {
	var res scanResult
	br := bufio.NewReaderSize(r, 256<<10)
	var hdr [headerSize]byte
	for {
		n, err := io.ReadFull(br, hdr[:])
		if err == io.EOF {
			res.clean = true
			return res, nil
		}
		if err == io.ErrUnexpectedEOF {
			res.clean, res.why = isZero(hdr[:n]), "a partial header"
			return res, nil
		}
		if err != nil {
			return res, err
		}
		length := binary.LittleEndian.Uint32(hdr[0:4])
		crc := binary.LittleEndian.Uint32(hdr[4:8])
		if length == 0 {
			if crc != 0 {
				res.why = "a bad header"
				return res, nil
			}
			res.clean, err = zeroToEOF(br)
			res.why = "data after the end marker"
			return res, err
		}
		if length > MaxRecordSize {
			res.why = fmt.Sprintf("a record of %d bytes", length)
			return res, nil
		}
		rec := make([]byte, length)
		if _, err := io.ReadFull(br, rec); err != nil {
			if err == io.ErrUnexpectedEOF || err == io.EOF {
				res.why = "a partial record"
				return res, nil
			}
			return res, err
		}
		if crc32.Checksum(rec, castagnoli) != crc {
			res.why = "a record with a bad checksum"
			return res, nil
		}
		if err := fn(rec); err != nil {
			return res, err
		}
		res.end += headerSize + int64(length)
		res.records++
	}
}

func isZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeros))
		if !bytes.Equal(b[:n], zeros[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

// zeroToEOF reports whether every byte left in r is zero.
func zeroToEOF(r io.Reader) (bool, error) {
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		if !isZero(buf[:n]) {
			return false, nil
		}
		if err == io.EOF {
			return true, nil
		}
		if err != nil {
			return false, err
		}
	}
}

// spares prepares, one at a time and in the background, the zero-filled
// files that become segments, so that moving to a new segment costs a
// rename rather than writing a whole segment. A prepared file is written
// as spare.tmp, fsynced, and renamed to spare; it survives Close.
type spares struct {
	dir    string
	size   int64
	noSync bool

	mu     sync.Mutex
	ready  *os.File      // the file named spare, if prepared
	busy   chan struct{} // closed when the preparation in progress ends
	err    error         // from the last preparation
	closed bool
}

// adopt takes an existing spare file of the right size, left by an earlier
// Open, and removes anything else.
func (s *spares) adopt() error {
	os.Remove(filepath.Join(s.dir, spareName+tmpSuffix))
	name := filepath.Join(s.dir, spareName)
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi, err := f.Stat(); err != nil || fi.Size() != s.size {
		f.Close()
		return os.Remove(name)
	}
	s.ready = f
	return nil
}

// start begins preparing a spare in the background unless one is ready
// or being prepared.
func (s *spares) start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ready != nil || s.busy != nil || s.closed {
		return
	}
	done := make(chan struct{})
	s.busy, s.err = done, nil
	go func() {
		f, err := s.prepare()
		s.mu.Lock()
		s.ready, s.err, s.busy = f, err, nil
		s.mu.Unlock()
		close(done)
	}()
}

// take returns the spare file, named spare, waiting for it to be prepared
// if need be. The caller renames it.
func (s *spares) take() (*os.File, error) {
	s.start()
	s.mu.Lock()
	s.awaitIdle()
	defer s.mu.Unlock()
	f, err := s.ready, s.err
	s.ready, s.err = nil, nil
	if f == nil && err == nil {
		err = ErrClosed
	}
	return f, err
}

// close stops a preparation in progress and closes the ready spare,
// leaving it on disk for the next Open.
func (s *spares) close() {
	s.mu.Lock()
	s.closed = true
	s.awaitIdle()
	defer s.mu.Unlock()
	if s.ready != nil {
		s.ready.Close()
		s.ready = nil
	}
}

// awaitIdle waits for the preparation in progress, if any, to end. s.mu
// is held on entry and on return, and let go while waiting.
func (s *spares) awaitIdle() {
	busy := s.busy
	if busy == nil {
		return
	}
	s.mu.Unlock()
	<-busy
	s.mu.Lock()
}

func (s *spares) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// prepare writes a zero-filled file of s.size bytes, syncs it and names it
// spare. It writes zeros rather than using fallocate: a file's unwritten
// extents would make each fdatasync update metadata.
//
// The zeros go to the disk a MiB at a time (spareWriteBack), each waited
// for before the next is written: left to the final sync, the whole
// segment (64 MiB by default) was written back at once, and every group
// commit of the log, syncing on the same disk meanwhile, waited behind it
// (on the loaded 2-core test machine, a quarter second without a commit
// where one takes about 150 µs; see the CHANGELOG).
func (s *spares) prepare() (f *os.File, err error) {
	tmp := filepath.Join(s.dir, spareName+tmpSuffix)
	f, err = os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
			f = nil
		}
	}()
	for off := int64(0); off < s.size; {
		if s.isClosed() {
			return nil, ErrClosed
		}
		n := min(s.size-off, int64(len(zeros)))
		if _, err := f.WriteAt(zeros[:n], off); err != nil {
			return nil, err
		}
		off += n
		if !s.noSync && (off%spareWriteBack == 0 || off == s.size) {
			start := (off - 1) / spareWriteBack * spareWriteBack
			if err := spareFlush(f, start, off-start); err != nil {
				return nil, err
			}
		}
	}
	if !s.noSync {
		if err := f.Sync(); err != nil {
			return nil, err
		}
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, spareName)); err != nil {
		return nil, err
	}
	return f, nil
}
