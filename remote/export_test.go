package remote

import "time"

// SetWaitChunk sets the longest wait of one request of s's waits (HTTP's
// is 30 s, with no option), so that tests see polls run out. Call it
// before s waits.
func SetWaitChunk(s interface{ Close() error }, d time.Duration) {
	switch s := s.(type) {
	case *HTTPStore:
		s.wait.chunk = d
	case *RESPStore:
		s.wait.chunk = d
	default:
		panic("SetWaitChunk: not a store of this package")
	}
}

// GiveUpBound is how long after a wait ended by its context the store's
// give-up may still find and free a grant that raced with the end
// (reclaimTimeout): the conformance suite's WaitCleanup for these stores.
const GiveUpBound = reclaimTimeout
