package redis

import (
	"context"
	"strings"

	"github.com/leasehold/leasehold"
)

// QueueStats reports how many wait.lua runs this store's waiters made and
// how many messages addressed to them it delivered.
func (s *Store) QueueStats() (waitRuns, delivered int64) {
	return s.qstats.waitRuns.Load(), s.qstats.delivered.Load()
}

// StaleGrants reports how many grant messages this store's waiters set
// aside as stale (a later step of theirs found them queued).
func (s *Store) StaleGrants() int64 { return s.qstats.staleGrants.Load() }

// BeforeStep makes every waiter of s call f before each of its wait.lua
// runs (set it before the waiters start).
func (s *Store) BeforeStep(f func()) { s.qstats.beforeStep = f }

// Leave runs a waiter's leave step (leave.lua) as AcquireWait does when
// its context ends.
func (s *Store) Leave(ctx context.Context, req leasehold.AcquireRequest, id string) error {
	return s.leave(ctx, req, id)
}

// Translate is translate, the mapping of go-redis errors.
func (s *Store) Translate(ctx context.Context, op string, err error) error {
	return s.translate(ctx, op, err)
}

// WaitFailed is waitFailed, AcquireWait's answer to a failed step.
func (s *Store) WaitFailed(ctx context.Context, req leasehold.AcquireRequest, id string, err error) error {
	return s.waitFailed(ctx, req, id, err)
}

// FunctionLibrary returns the name of the store's Redis Function library
// and the prefix of its functions' names.
func FunctionLibrary() (name, fnPrefix string) {
	return lua.name, strings.TrimSuffix(lua.acquire.fn, "acquire")
}

// UsesFunctions reports whether the store calls the library (false: it
// sends scripts).
func (s *Store) UsesFunctions() bool { return !s.fn.off.Load() }
