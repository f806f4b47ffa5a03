package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/redis"
	"github.com/leasehold/leasehold/remote"
)

// pollGrace is how long past the wait it asked the server for a
// long-poll of the lease server may go unanswered before the waiter says
// the store does not answer.
const pollGrace = 5 * time.Second

// pollObserved is a store that tells of each long-poll of a wait (the
// lease server's, remote.PollObserver).
type pollObserved interface {
	ObservePolls(f remote.PollObserver)
}

// noAnswerError is the "error" of a long-poll that has not been answered
// pollGrace after the wait it asked for: the server is stopped or hung
// (its connections open, nothing read). Issue 29's red team, #3: a waiter
// on a SIGSTOPped server said nothing for 40 s, its long-poll pending.
type noAnswerError struct {
	wait time.Duration
	sent time.Time
}

func (n *noAnswerError) Error() string {
	if n.wait <= 0 {
		return "no answer to a request asked at " + n.sent.Local().Format(time.TimeOnly)
	}
	return fmt.Sprintf("no answer to a wait of %s asked at %s", shortDuration(n.wait), n.sent.Local().Format(time.TimeOnly))
}

// watchPolls has the store's long-polls (if it tells of them) report to
// s: one not answered pollGrace past its wait is an outage (failed), the
// answer after it the end of one (answered). stop ends it.
func (s *waitStatus) watchPolls(store leasehold.Store) (stop func()) {
	po, ok := store.(pollObserved)
	if !ok {
		return func() {}
	}
	po.ObservePolls(s.poll)
	return func() { po.ObservePolls(nil) }
}

// poll is the remote.PollObserver of watchPolls.
func (s *waitStatus) poll(wait time.Duration) func(error) {
	sent := time.Now()
	overdue := make(chan struct{})
	t := time.AfterFunc(wait+pollGrace, func() {
		s.failed(&noAnswerError{wait: wait, sent: sent})
		close(overdue)
	})
	return func(err error) {
		if t.Stop() {
			return
		}
		<-overdue
		if err == nil || errors.Is(err, leasehold.ErrHeld) {
			s.answered()
		}
		// Else the wait's OnError reports err.
	}
}

// answered records an answer of the store after an outage (failed): the
// next line says it answers again. A grant that replicas did not
// acknowledge is not the end of that outage.
func (s *waitStatus) answered() {
	s.mu.Lock()
	was := s.err != nil && !errors.As(s.err, new(*redis.UnreplicatedError))
	if was {
		s.err = nil
	}
	s.mu.Unlock()
	if was {
		s.wake()
	}
}
