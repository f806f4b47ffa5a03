package cli

import (
	"fmt"
	"io"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/leasehold/leasehold"
)

// waitStatus shows who holds the lease while "run" waits for it. On a
// terminal it keeps one status line up to date in place (redrawn every
// second, so the countdown moves); elsewhere it prints one line when the
// wait begins. Its update method is the OnWait callback and never blocks:
// all writing happens on the waitStatus goroutine.
type waitStatus struct {
	w    io.Writer
	name string
	fd   int // terminal file descriptor, or -1

	mu       sync.Mutex
	held     *leasehold.HeldError
	seen     time.Time // when held was observed
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
	s := &waitStatus{
		w: w, name: name, fd: terminalFD(w),
		kick: make(chan struct{}, 1), done: make(chan struct{}), finished: make(chan struct{}),
	}
	go s.loop()
	return s
}

// update records the holder's details; it is the OnWait callback.
func (s *waitStatus) update(h *leasehold.HeldError) {
	s.mu.Lock()
	s.held, s.seen = h, time.Now()
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// last returns the holder seen last, or nil.
func (s *waitStatus) last() *leasehold.HeldError {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}

// stop ends the display and clears the status line. It may be called more
// than once.
func (s *waitStatus) stop() {
	s.stopOnce.Do(func() { close(s.done) })
	<-s.finished
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
	for {
		select {
		case <-s.done:
			if shown && s.fd >= 0 {
				fmt.Fprint(s.w, "\r\x1b[K")
			}
			return
		case <-s.kick:
		case <-tick:
		}
		s.mu.Lock()
		h, seen := s.held, s.seen
		s.mu.Unlock()
		if h == nil {
			continue
		}
		switch {
		case s.fd >= 0:
			fmt.Fprint(s.w, "\r\x1b[K"+truncate(statusLine(s.name, h, time.Since(seen)), s.width()))
			shown = true
		case !shown:
			fmt.Fprintf(s.w, "leasehold: waiting for %s (held by %s, token %d)\n", s.name, h.Owner, h.Token)
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

// statusLine describes the holder h, observed elapsed ago.
func statusLine(name string, h *leasehold.HeldError, elapsed time.Duration) string {
	since := ""
	if !h.Acquired.IsZero() {
		since = " since " + h.Acquired.Local().Format(time.TimeOnly)
	}
	rem := max(h.Remaining-elapsed, 0)
	return fmt.Sprintf("waiting for %s: held by %s (token %d)%s, expires in %s",
		name, h.Owner, h.Token, since, rem.Round(time.Second))
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
