package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/redis"
)

// waitStatus shows who holds the lease while "run" waits for it. On a
// terminal it keeps one status line up to date in place (redrawn every
// second, so the countdown moves); elsewhere it prints the same line once
// when the wait begins. Its update method is the OnWait callback and never
// blocks: all writing (and, for permits, reading the holders) happens on
// the waitStatus goroutine.
type waitStatus struct {
	w    io.Writer
	name string
	fd   int // terminal file descriptor, or -1
	// quiet: off a terminal, no line naming the holder (newPermitWaitStatus).
	quiet bool
	// permits and holders, for a semaphore: the line names every holder
	// of the permits below permits, read with holders after each update.
	permits int
	holders func(ctx context.Context) ([]leasehold.Record, error)
	ctx     context.Context // ends holders calls at stop
	cancel  context.CancelFunc
	recs    []leasehold.Record // loop goroutine only

	mu       sync.Mutex
	held     *leasehold.HeldError
	seen     time.Time // when held was observed
	err      error     // the store's error since the last answer, or nil
	errSince time.Time // when the store stopped answering
	kick     chan struct{}
	done     chan struct{}
	finished chan struct{}
	stopOnce sync.Once
}

// fder is implemented by *os.File.
type fder interface{ Fd() uintptr }

// terminalFD returns w's file descriptor if w is a terminal, else -1.
func terminalFD(w io.Writer) int {
	f, ok := w.(fder)
	if !ok {
		return -1
	}
	fd := int(f.Fd())
	if !term.IsTerminal(fd) {
		return -1
	}
	return fd
}

func newWaitStatus(w io.Writer, name string) *waitStatus {
	return newPermitWaitStatus(w, name, 0, nil, false)
}

// newPermitWaitStatus is newWaitStatus for one of n permits of name, whose
// holders are read with holders (nil: only the holder OnWait reports).
// quiet: off a terminal, the line naming the holder is not written (run
// and hold without --verbose, as flock -w is silent while it waits: a
// cron job that had to wait mailed it, issue 29's red team, #10); the
// store's outages still are.
func newPermitWaitStatus(w io.Writer, name string, n int, holders func(context.Context) ([]leasehold.Record, error), quiet bool) *waitStatus {
	s := &waitStatus{
		w: w, name: name, fd: terminalFD(w), permits: n, holders: holders, quiet: quiet,
		kick: make(chan struct{}, 1), done: make(chan struct{}), finished: make(chan struct{}),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	go s.loop()
	return s
}

// update records the holder's details; it is the OnWait callback.
func (s *waitStatus) update(h *leasehold.HeldError) {
	s.mu.Lock()
	s.held, s.seen = h, time.Now()
	s.err = nil
	s.mu.Unlock()
	s.wake()
}

// failed records a store error that the wait retries (OnError): the store
// or the lease server does not answer.
func (s *waitStatus) failed(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.errSince = time.Now()
	}
	s.err = err
	s.mu.Unlock()
	s.wake()
}

// wake has the loop redraw.
func (s *waitStatus) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// lastErr returns the store's error since the last answer, or nil.
func (s *waitStatus) lastErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// lastSeen returns the holder seen last, or nil, and when it was seen.
func (s *waitStatus) lastSeen() (*leasehold.HeldError, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held, s.seen
}

// stop ends the display and clears the status line. It may be called more
// than once.
func (s *waitStatus) stop() {
	s.stopOnce.Do(func() {
		close(s.done)
		s.cancel()
	})
	<-s.finished
}

// holdersTimeout bounds one read of a semaphore's holders for the line.
const holdersTimeout = 5 * time.Second

// refresh reads the semaphore's holders; on failure the line falls back
// to the one holder OnWait reported.
func (s *waitStatus) refresh() {
	if s.holders == nil {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, holdersTimeout)
	defer cancel()
	recs, err := s.holders(ctx)
	if err != nil {
		s.recs = nil
		return
	}
	s.recs = recs
	s.keepPermits()
}

// keepPermits keeps in s.recs only the permits below s.permits.
func (s *waitStatus) keepPermits() {
	recs := s.recs[:0]
	for _, r := range s.recs {
		if i, ok := leasehold.PermitIndex(s.name, r.Name); ok && i < s.permits {
			recs = append(recs, r)
		}
	}
	s.recs = recs
}

func (s *waitStatus) loop() {
	defer close(s.finished)
	var tick <-chan time.Time
	if s.fd >= 0 {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		tick = t.C
	}
	shown := false
	down := false      // the line says the store does not answer
	var read time.Time // when recs were read
	for {
		select {
		case <-s.done:
			s.mu.Lock()
			err := s.err
			s.mu.Unlock()
			if down && err == nil && s.fd < 0 {
				// The answer that ended the wait (answered, just before).
				fmt.Fprintf(s.w, "leasehold: waiting for %s: the store answers again\n", visible(s.name))
			}
			if shown && s.fd >= 0 {
				fmt.Fprint(s.w, "\r\x1b[K")
			}
			return
		case <-s.kick:
			if s.holders != nil && (s.fd >= 0 || !shown && !s.quiet) {
				s.refresh()
				read = time.Now()
			}
		case <-tick:
		}
		s.mu.Lock()
		h, seen, err, since := s.held, s.seen, s.err, s.errSince
		s.mu.Unlock()
		if err != nil {
			// Said once off a terminal, kept on the line on one.
			line := unreachableLine(s.name, err, since)
			switch {
			case s.fd >= 0:
				fmt.Fprint(s.w, "\r\x1b[K"+truncate(line, s.width()))
			case !down:
				fmt.Fprintf(s.w, "leasehold: %s\n", line)
			}
			shown, down = true, true
			continue
		}
		if down && s.fd < 0 {
			fmt.Fprintf(s.w, "leasehold: waiting for %s: the store answers again\n", visible(s.name))
		}
		down = false
		if h == nil {
			continue
		}
		line := statusLine(s.name, h, time.Since(seen))
		if len(s.recs) > 0 {
			line = permitLine(s.name, s.permits, s.recs, time.Since(read))
		}
		switch {
		case s.fd >= 0:
			fmt.Fprint(s.w, "\r\x1b[K"+truncate(line, s.width()))
			shown = true
		case !shown && !s.quiet:
			fmt.Fprintf(s.w, "leasehold: %s\n", line)
			shown = true
		}
	}
}

// width returns the terminal's width, or 0 if unknown.
func (s *waitStatus) width() int {
	w, _, err := term.GetSize(s.fd)
	if err != nil {
		return 0
	}
	return w
}

// unreachableLine says that the wait for name goes on while the store
// does not answer (err, since since).
func unreachableLine(name string, err error, since time.Time) string {
	msg, _, _ := strings.Cut(err.Error(), "\n")
	if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	what := "the store does not answer"
	if errors.As(err, new(*redis.UnreplicatedError)) {
		what = "fewer replicas than asked acknowledge its grant, which the store gives back"
	}
	return fmt.Sprintf("waiting for %s: %s (since %s: %s); still trying",
		visible(name), what, since.Local().Format(time.TimeOnly), msg)
}

// heldMessage says who holds name (h), for a --no-wait that found it
// held.
func heldMessage(name string, h *leasehold.HeldError) string {
	if hb := holdback(h, h.Remaining); hb != "" {
		return fmt.Sprintf("%s was not granted: %s", visible(name), hb)
	}
	return fmt.Sprintf("%s is held by %s (token %d, expires in %s)", visible(name), visible(h.Owner), h.Token, roundDuration(h.Remaining))
}

// statusLine describes the holder h, observed elapsed ago.
func statusLine(name string, h *leasehold.HeldError, elapsed time.Duration) string {
	if hb := holdback(h, h.Remaining-elapsed); hb != "" {
		return fmt.Sprintf("waiting for %s: %s", visible(name), hb)
	}
	return fmt.Sprintf("waiting for %s (held by %s, %s)", visible(name), visible(h.Owner), grantDetails(h.Token, h.Acquired, h.Remaining-elapsed))
}

// permitLine describes the holders recs of name's n permits, read elapsed
// ago: "waiting for pool (2/2 permits held by A, B; A: token 3, since
// 15:04:05, expires in 5s; B: ...)".
func permitLine(name string, n int, recs []leasehold.Record, elapsed time.Duration) string {
	return fmt.Sprintf("waiting for %s (%d/%d permits held by %s)", visible(name), len(recs), n, permitHoldersAfter(recs, elapsed))
}

// permitHolders is "A, B; A: token 3, since 15:04:05, expires in 5s; B:
// ..." for the permits recs.
func permitHolders(recs []leasehold.Record) string { return permitHoldersAfter(recs, 0) }

func permitHoldersAfter(recs []leasehold.Record, elapsed time.Duration) string {
	owners := make([]string, len(recs))
	details := make([]string, len(recs))
	for i, r := range recs {
		owners[i] = visible(r.Owner)
		details[i] = owners[i] + ": " + grantDetails(r.Token, r.Acquired, r.Remaining-elapsed)
	}
	return strings.Join(owners, ", ") + "; " + strings.Join(details, "; ")
}

// grantDetails is "token 7, since 15:04:05, expires in 12s" (no "since"
// when the store did not say).
func grantDetails(token uint64, acquired time.Time, remaining time.Duration) string {
	since := ""
	if !acquired.IsZero() {
		since = ", since " + acquired.Local().Format(time.TimeOnly)
	}
	return fmt.Sprintf("token %d%s, expires in %s", token, since, max(remaining, 0).Round(time.Second))
}

// truncate shortens line to fit in width-1 columns (counting runes), so
// that it never wraps; width 0 means unknown.
func truncate(line string, width int) string {
	if width <= 1 {
		return line
	}
	n := 0
	for i := range line {
		if n == width-1 {
			return line[:i]
		}
		n++
	}
	return line
}

// giveUpReadTimeout bounds the read of the holder that a wait that ran
// out may make (lastHolder): with abandonGrace and closeGrace, `--wait D`
// returns at most 2 s after D, whatever the store does; a read that takes
// longer is dropped for the last refusal seen.
const giveUpReadTimeout = 250 * time.Millisecond

// lastHolder is the holder that a wait that ran out names: the last
// refusal seen when it named a holder (a grant's token); otherwise (a
// hold-back or a queue, token 0, or nothing seen) the lease's holder now,
// read from the store within giveUpReadTimeout (waiting in a store's own
// queue, the client reports only the first attempt's refusal), else that
// refusal with the time it has left now, unless its time has passed.
// Issue 31: a wait behind a real holder named a hold-back that had ended
// long before. The read is not made behind a holder seen: R17 timed `run
// --wait 1.5s` against a hung server, and a read after every wait
// (bounded by 2 s) made it return after 3.5 s.
func (o *runOptions) lastHolder(client *leasehold.Client, ws *waitStatus) *leasehold.HeldError {
	held, seen := ws.lastSeen()
	if held != nil && held.Token != 0 {
		return held
	}
	if o.permits == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), giveUpReadTimeout)
		rec, err := client.Store().Get(ctx, o.name)
		cancel()
		if err == nil {
			return &leasehold.HeldError{Name: rec.Name, Owner: rec.Owner, Token: rec.Token, Remaining: rec.Remaining, Acquired: rec.Acquired}
		}
	}
	if held == nil {
		return nil
	}
	// Its time left now, not at the refusal (issue 31 red team, #9: a
	// PostgreSQL hold-back seen at the first attempt was named with all
	// of its 15 s at the give-up).
	left := held.Remaining - time.Since(seen)
	if left <= 0 {
		return nil
	}
	now := *held
	now.Remaining = left
	return &now
}
