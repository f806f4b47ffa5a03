// Package wal is the lease server's write-ahead log: an append-only
// sequence of opaque records, made durable by group commit, and snapshots
// that let the records they cover be deleted.
//
// # Files
//
// A log is a directory holding
//
//	log-%016x   segments, numbered from 1 without gaps
//	snap-%016x  snapshots: snap-N holds the state after every record of
//	            the segments below N
//	spare       a pre-allocated segment waiting to become the next one
//	LOCK        locked while a Log has the directory open (Linux)
//
// A segment is created full size and filled with zeros, fsynced, and only
// then named log-N, so that writing records into it and calling fdatasync
// never has to update the file's size or allocate blocks. Records follow
// each other from the start of a segment, each framed as
//
//	length  uint32, little-endian, 1 to MaxRecordSize
//	crc     uint32, little-endian, CRC-32C (Castagnoli) of the payload
//	payload [length]byte
//
// and the zeros after the last one mark the end of the written data. A
// record never spans two segments.
//
// # Durability
//
// One goroutine writes what has been appended since its previous write
// with one pwrite and one fdatasync; appends that arrive meanwhile form
// the next batch. With Options.Syncs above 1 (the default is 1), up to
// that many batches may be syncing at once: the next batch is written and
// its fdatasync started while the previous one's still runs (an fdatasync
// covers every write that returned before it was called). Either way
// batches are reported durable strictly in append order, each only once
// its own fdatasync (which began after every earlier batch was written)
// has returned, and once one fails every later batch fails too. It
// finishes (writes and syncs) a segment, and waits for the syncs under
// way, before it writes anything into the next, so after a crash only the
// newest segment can end in a torn write. Open treats a bad record there
// as the end of the log, and a bad record in any earlier segment as
// corruption (ErrCorrupt).
//
// # Snapshots
//
// The caller keeps its state in memory and logs every change. When Size
// grows large it snapshots: under the lock that orders its Appends, it
// calls Rotate and copies its state; then, possibly in another goroutine,
// it passes the copy to WriteSnapshot with the sequence number Rotate
// returned. Once the snapshot is durable the segments it covers are
// deleted. Open loads the newest intact snapshot and replays only the
// records after it.
package wal

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"
)

// MaxRecordSize is the largest record Append accepts.
const MaxRecordSize = 1 << 20

// DefaultSegmentSize is the segment size used when Options.SegmentSize is 0.
const DefaultSegmentSize = 64 << 20

// headerSize is the size of a record's frame header: length and CRC.
const headerSize = 8

var (
	// ErrClosed is returned by operations on a closed Log.
	ErrClosed = errors.New("wal: log closed")
	// ErrTooLarge is reported for a record longer than MaxRecordSize or
	// than a segment can hold.
	ErrTooLarge = errors.New("wal: record too large")
	// ErrCorrupt is returned by Open when a segment other than the newest
	// holds a bad record, or segments are missing.
	ErrCorrupt = errors.New("wal: log corrupt")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// datasync makes a segment's records durable. Tests replace it.
var datasync = fdatasync

// Options configure a Log.
type Options struct {
	// Dir is the log's directory, created (mode 0700) if missing.
	Dir string
	// NoSync skips fdatasync and every other fsync: records are reported
	// durable once written to the operating system. For tests and
	// benchmarks only.
	NoSync bool
	// SegmentSize is the size of each pre-allocated segment file in
	// bytes; 0 means DefaultSegmentSize. A record and its 8-byte header
	// must fit in one segment.
	SegmentSize int64
	// Syncs is how many group commits may be syncing at once (each
	// written with one pwrite, then made durable with its own
	// fdatasync); 0 means DefaultSyncs. More than one helps only where
	// the disk serves overlapping flushes faster than one after the
	// other and the CPU is not the limit: it makes batches smaller.
	// Records are reported durable in append order whatever it is.
	Syncs int
	// OnSync, if not nil, is called (like Append's done, just before
	// them) after each group commit that wrote records, with the time the
	// write and sync took and the number of records they made durable.
	OnSync func(d time.Duration, records int)
}

// DefaultSyncs is the number of group commits that may be syncing at once
// when Options.Syncs is 0: one, the batch gathered during a sync waits for
// it to end (on the 2-core test machine, shared with other work, two gave
// no more pairs/s and a higher pair latency; see docs/benchmarks.md).
const DefaultSyncs = 1

// A Log is an open write-ahead log. Its methods may be called from
// several goroutines at once.
type Log struct {
	opts   Options
	dir    *os.File // the directory, to fsync after renames
	unlock func() error
	spares *spares

	mu       sync.Mutex
	work     sync.Cond        // signalled when pending gains work or the log closes
	pending  *batch           // appended, not yet taken by the committer
	free     []*batch         // empty batches, for the committer to swap in
	seq      uint64           // segment the next record goes to
	off      int64            // offset in segment seq of the next record
	appended int64            // bytes (with headers) appended and replayed since Open
	segStart map[uint64]int64 // appended when each segment ≥ snapSeq began
	snapSeq  uint64           // newest snapshot, 0 if none
	base     int64            // appended when segment snapSeq began
	err      error            // sticky: set when a write or sync fails
	closed   bool

	// snapMu serialises WriteSnapshot, and keeps Close from closing the
	// directory under one.
	snapMu sync.Mutex

	// Owned by the committer goroutine (and by Open before it starts).
	f       *os.File       // active segment
	fseq    uint64         // its sequence number
	syncing sync.WaitGroup // fdatasyncs under way
	slots   chan struct{}  // one per batch taken and not yet reported
	stopped chan struct{}

	// The batches taken by the committer and not yet reported (finish).
	cmu       sync.Mutex
	queue     []*batch // in append order
	reporting bool     // a goroutine is reporting the head of queue
	broken    error    // the first failed batch's error
}

// A batch is what the committer writes and syncs at once.
type batch struct {
	chunks  []chunk  // the bytes to write, in segment order
	waiters []waiter // the callbacks, in append order
	records int

	// Set by finish (under Log.cmu) once the batch is durable or failed.
	done bool
	err  error         // why it failed (the log's error)
	took time.Duration // writing and syncing it
}

// A chunk is a run of encoded records for one place in one segment.
// A chunk with no bytes still makes the committer open its segment.
type chunk struct {
	seq uint64
	off int64
	buf []byte
}

type waiter struct {
	done func(error)
	err  error // reported instead of the batch's result (a refused record)
}

func (b *batch) empty() bool { return len(b.chunks) == 0 && len(b.waiters) == 0 }

// chunk returns the chunk that continues segment seq at offset off,
// starting one if the batch's last chunk is for another segment.
func (b *batch) chunk(seq uint64, off int64) *chunk {
	if n := len(b.chunks); n > 0 && b.chunks[n-1].seq == seq {
		return &b.chunks[n-1]
	}
	if len(b.chunks) < cap(b.chunks) {
		b.chunks = b.chunks[:len(b.chunks)+1]
	} else {
		b.chunks = append(b.chunks, chunk{})
	}
	c := &b.chunks[len(b.chunks)-1]
	c.seq, c.off, c.buf = seq, off, c.buf[:0]
	return c
}

// reset empties b for reuse, keeping buffers of reasonable size.
func (b *batch) reset() {
	const keep = 4 << 20
	for i := range b.chunks {
		if cap(b.chunks[i].buf) > keep {
			b.chunks[i].buf = nil
		}
	}
	clear(b.waiters) // drop references to callbacks
	if cap(b.waiters) > keep/64 {
		b.waiters = nil
	}
	b.chunks, b.waiters, b.records = b.chunks[:0], b.waiters[:0], 0
	b.done, b.err, b.took = false, nil, 0
}

// Open opens the log in opts.Dir, creating it if needed, and recovers its
// contents: it calls load with the newest intact snapshot, if there is
// one, then apply with every record appended after that snapshot, in
// append order. rec is apply's own (it is not reused). A torn or
// zero-filled tail of the newest segment is the normal end of the log;
// Open trims it. A bad record anywhere else, or a missing segment, is
// reported as ErrCorrupt. An error from load or apply aborts Open and is
// returned. New records go to a fresh segment.
func Open(opts Options, load func(r io.Reader) error, apply func(rec []byte) error) (*Log, error) {
	if opts.SegmentSize == 0 {
		opts.SegmentSize = DefaultSegmentSize
	}
	if opts.SegmentSize <= headerSize {
		return nil, fmt.Errorf("wal: segment size %d too small", opts.SegmentSize)
	}
	if opts.Syncs < 0 {
		return nil, fmt.Errorf("wal: Syncs %d is negative", opts.Syncs)
	}
	if opts.Syncs == 0 {
		opts.Syncs = DefaultSyncs
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, err
	}
	unlock, err := lockDir(filepath.Join(opts.Dir, "LOCK"))
	if err != nil {
		return nil, err
	}
	dir, err := os.Open(opts.Dir)
	if err != nil {
		unlock()
		return nil, err
	}
	l := &Log{
		opts:     opts,
		dir:      dir,
		unlock:   unlock,
		spares:   &spares{dir: opts.Dir, size: opts.SegmentSize, noSync: opts.NoSync},
		pending:  new(batch),
		segStart: make(map[uint64]int64),
		slots:    make(chan struct{}, opts.Syncs),
		stopped:  make(chan struct{}),
	}
	l.work.L = &l.mu
	if err := l.recover(load, apply); err != nil {
		l.spares.close()
		if l.f != nil {
			l.f.Close()
		}
		dir.Close()
		unlock()
		return nil, err
	}
	l.spares.start()
	go l.run()
	return l, nil
}

// Append queues rec (it is copied: the caller may reuse it) and calls done
// once rec and every record appended before it are durable, with nil, or
// with the error that stopped them. A failed write or sync breaks the log:
// every later Append fails too, and the log must be reopened. A record
// longer than MaxRecordSize, or than a segment can hold, fails alone with
// ErrTooLarge. A record reported failed by a write or sync error may or may
// not be recovered by the next Open.
//
// Records appended while the log writes and syncs earlier ones are
// written together with one write and one fdatasync. done may be nil. It
// is called from one of the log's goroutines, in append order, one call
// at a time; it must not block for long, and must not call Sync,
// WriteSnapshot or Close (it may call Append). On a closed log, done is called with ErrClosed from a new
// goroutine.
func (l *Log) Append(rec []byte, done func(error)) {
	n := headerSize + int64(len(rec))
	var crc uint32
	if len(rec) <= MaxRecordSize {
		crc = crc32.Checksum(rec, castagnoli)
	}

	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		if done != nil {
			go done(ErrClosed)
		}
		return
	}
	b := l.pending
	switch {
	case l.err != nil:
		b.waiters = append(b.waiters, waiter{done, l.err})
	case len(rec) > MaxRecordSize || n > l.opts.SegmentSize:
		b.waiters = append(b.waiters, waiter{done, fmt.Errorf("%w: %d bytes", ErrTooLarge, len(rec))})
	default:
		if l.off+n > l.opts.SegmentSize {
			l.nextSegmentLocked()
		}
		c := b.chunk(l.seq, l.off)
		c.buf = appendHeader(c.buf, uint32(len(rec)), crc)
		c.buf = append(c.buf, rec...)
		l.off += n
		l.appended += n
		b.records++
		b.waiters = append(b.waiters, waiter{done: done})
	}
	l.work.Signal()
	l.mu.Unlock()
}

// nextSegmentLocked makes later records go to a new segment.
func (l *Log) nextSegmentLocked() {
	l.seq++
	l.off = 0
	l.segStart[l.seq] = l.appended
	l.pending.chunk(l.seq, 0) // the committer creates the segment even if empty
}

// Sync blocks until every record appended before the call is durable. It
// returns the error that broke the log, if any, or ErrClosed.
func (l *Log) Sync() error {
	ch := make(chan error, 1)
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.pending.waiters = append(l.pending.waiters, waiter{done: func(err error) { ch <- err }})
	l.work.Signal()
	l.mu.Unlock()
	return <-ch
}

// barrier is Sync, except that on a closed log it waits for the committer
// to finish and reports whether everything was written.
func (l *Log) barrier() error {
	if err := l.Sync(); err != ErrClosed {
		return err
	}
	<-l.stopped
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Rotate ends the current segment: every record appended before the call
// is in a segment below the returned sequence number, every later one in
// that segment or after it. (If nothing was appended since the current
// segment began, it is returned as is.) Rotate does not wait for I/O.
//
// Rotate is the first step of a snapshot: the caller serialises Rotate
// with its own Appends, copies its state as of the call, and passes seq
// and the copy to WriteSnapshot, possibly from another goroutine.
func (l *Log) Rotate() (seq uint64, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, ErrClosed
	}
	if l.err != nil {
		return 0, l.err
	}
	if l.off > 0 {
		l.nextSegmentLocked()
		l.work.Signal()
	}
	return l.seq, nil
}

// Size returns the number of bytes (records and their headers) appended
// since the newest snapshot, counting those replayed by Open. The caller
// snapshots when it grows large.
func (l *Log) Size() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.appended - l.base
}

// Close writes and syncs what is pending, stops the log's goroutine and
// closes its files, after waiting for a WriteSnapshot in progress. It
// returns the error that broke the log, if any. Later Appends fail with
// ErrClosed.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.closed = true
	l.work.Signal()
	l.mu.Unlock()
	<-l.stopped

	l.snapMu.Lock()
	defer l.snapMu.Unlock()
	l.spares.close()
	l.mu.Lock()
	err := l.err
	l.mu.Unlock()
	return errors.Join(err, l.f.Close(), l.dir.Close(), l.unlock())
}

// run is the committer: it takes the pending batch, writes it and starts
// its sync, with at most opts.Syncs batches syncing or being reported at
// once, until the log is closed and drained. Whoever finishes a batch (a
// sync's goroutine, or run itself) reports the batches that are then done
// at the head of the queue, in order (finish).
func (l *Log) run() {
	defer close(l.stopped)
	for {
		// Take a slot first: while all are busy the pending batch grows.
		l.slots <- struct{}{}
		l.mu.Lock()
		for l.pending.empty() && !l.closed {
			l.work.Wait()
		}
		if l.pending.empty() {
			l.mu.Unlock()
			break
		}
		b := l.pending
		l.pending = l.newBatchLocked()
		err := l.err
		l.mu.Unlock()

		l.cmu.Lock()
		l.queue = append(l.queue, b)
		l.cmu.Unlock()
		switch {
		case err != nil:
			l.finish(b, 0, err)
		case len(b.chunks) == 0:
			l.finish(b, 0, nil) // only waiters (Sync): reported after what precedes them
		case len(b.chunks) == 1 && b.chunks[0].seq == l.fseq:
			l.write(b)
		default:
			// A new segment: everything before it must be durable first.
			l.syncing.Wait()
			l.mu.Lock()
			err := l.err
			l.mu.Unlock()
			if err == nil {
				start := time.Now()
				err = l.commit(b)
				if err != nil {
					err = l.breakWith(err)
				}
				l.finish(b, time.Since(start), err)
			} else {
				l.finish(b, 0, err)
			}
		}
	}
	<-l.slots
	l.syncing.Wait() // every batch taken is reported: see finish
}

// newBatchLocked returns an empty batch to gather the next appends in.
// l.mu held.
func (l *Log) newBatchLocked() *batch {
	if n := len(l.free); n > 0 {
		b := l.free[n-1]
		l.free = l.free[:n-1]
		return b
	}
	return new(batch)
}

// write writes b, whose one chunk continues the active segment, and
// syncs it: in another goroutine if other batches may be written
// meanwhile (Syncs > 1), else at once.
func (l *Log) write(b *batch) {
	start := time.Now()
	c := &b.chunks[0]
	if _, err := l.f.WriteAt(c.buf, c.off); err != nil {
		l.finish(b, 0, l.breakWith(err))
		return
	}
	if l.opts.NoSync {
		l.finish(b, time.Since(start), nil)
		return
	}
	f, fseq := l.f, l.fseq
	sync := func() {
		var err error
		if serr := datasync(f); serr != nil {
			err = l.breakWith(fmt.Errorf("wal: fdatasync %s: %w", segmentName(fseq), serr))
		}
		l.finish(b, time.Since(start), err)
	}
	if l.opts.Syncs == 1 {
		sync()
		return
	}
	l.syncing.Add(1)
	go func() {
		defer l.syncing.Done()
		sync()
	}()
}

// Err returns the error that broke the log (a write or sync that failed:
// no record appended since is made durable), or nil while it works.
func (l *Log) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// breakWith marks the log broken by err, unless it is already, and
// returns the error that broke it.
func (l *Log) breakWith(err error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		l.err = fmt.Errorf("wal: log broken: %w", err)
	}
	return l.err
}

// finish records that b, taken by run, is durable (err nil) or failed,
// then reports every batch done at the head of the queue, in order, unless
// another goroutine is reporting: that one reports b too, since it checks
// the head again, under l.cmu, before it stops. Once a batch failed, every
// later one fails with its error, even if its own sync went well.
func (l *Log) finish(b *batch, took time.Duration, err error) {
	l.cmu.Lock()
	b.took, b.err, b.done = took, err, true
	if l.reporting {
		l.cmu.Unlock()
		return
	}
	l.reporting = true
	for len(l.queue) > 0 && l.queue[0].done {
		h := l.queue[0]
		l.queue[0] = nil
		l.queue = l.queue[1:]
		if l.broken == nil && h.err != nil {
			l.broken = h.err
		}
		broken := l.broken
		l.cmu.Unlock()
		l.report(h, broken)
		l.cmu.Lock()
	}
	l.reporting = false
	if len(l.queue) == 0 {
		l.queue = l.queue[:0:0] // let the array go
	}
	l.cmu.Unlock()
}

// report calls b's callbacks (with broken, nil if the log is not broken),
// recycles b and frees its slot.
func (l *Log) report(b *batch, broken error) {
	if broken == nil && l.opts.OnSync != nil && b.records > 0 {
		l.opts.OnSync(b.took, b.records)
	}
	for _, w := range b.waiters {
		if w.done != nil {
			if w.err != nil {
				w.done(w.err)
			} else {
				w.done(broken)
			}
		}
	}
	b.reset()
	l.mu.Lock()
	l.free = append(l.free, b)
	l.mu.Unlock()
	<-l.slots
	// Let the goroutines just woken by done append again before the
	// next batch is taken, or their records would make a small batch
	// of their own: this doubles the batch size when appenders wait
	// for each record, and costs nothing when nothing else runs.
	runtime.Gosched()
}

// commit writes b's chunks, each with one write and one fdatasync, moving
// to the next segment when a chunk is for it. No other sync is under way.
func (l *Log) commit(b *batch) error {
	for i := range b.chunks {
		c := &b.chunks[i]
		if c.seq != l.fseq {
			if err := l.activate(c.seq); err != nil {
				return err
			}
		}
		if len(c.buf) == 0 {
			continue
		}
		if _, err := l.f.WriteAt(c.buf, c.off); err != nil {
			return err
		}
		if !l.opts.NoSync {
			if err := datasync(l.f); err != nil {
				return fmt.Errorf("wal: fdatasync %s: %w", segmentName(l.fseq), err)
			}
		}
	}
	return nil
}

// activate makes the spare segment segment seq, which must follow the
// active one, and starts preparing the next spare. The active segment has
// been synced: nothing is written to a segment before its predecessor is
// durable.
func (l *Log) activate(seq uint64) error {
	if seq != l.fseq+1 {
		return fmt.Errorf("wal: internal error: segment %d after %d", seq, l.fseq)
	}
	f, err := l.newSegment(seq)
	if err != nil {
		return err
	}
	l.f.Close()
	l.f, l.fseq = f, seq
	return nil
}

// newSegment takes the spare, names it segment seq and makes the name
// durable, then starts preparing another spare.
func (l *Log) newSegment(seq uint64) (*os.File, error) {
	f, err := l.spares.take()
	if err != nil {
		return nil, err
	}
	name := filepath.Join(l.opts.Dir, segmentName(seq))
	if err := os.Rename(filepath.Join(l.opts.Dir, spareName), name); err != nil {
		f.Close()
		return nil, err
	}
	if err := l.syncDir(); err != nil {
		f.Close()
		return nil, err
	}
	l.spares.start()
	return f, nil
}

func (l *Log) syncDir() error {
	if l.opts.NoSync {
		return nil
	}
	return l.dir.Sync()
}
