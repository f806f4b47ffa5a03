// Package leasestate holds the lease rules of the stores that decide in Go:
// given the stored row and the store's clock reading, decide what an
// operation does. The memory store and the deliberately broken stores of
// testrig/brokenstore apply them; the SQLite store reads its rows into Row
// and writes the same rules in SQL, as the PostgreSQL store does in its own
// SQL. The lease server's engine (package server) does not use this
// package: it keeps its own state, with one token counter for all names.
//
// Times are nanoseconds on the store's own clock. A row is never deleted:
// it keeps the name's fencing counter after release and expiry.
package leasestate

import (
	"time"

	"github.com/leasehold/leasehold"
)

// Row is the stored state of one name.
type Row struct {
	Name      string
	Owner     string
	RequestID string
	Token     uint64 // latest grant; the name's fencing counter
	Data      []byte
	TTL       time.Duration
	Expires   int64 // store clock, ns; meaningful while Held
	Held      bool  // false once released
	Acquired  time.Time
}

// Live reports whether the row is held and unexpired at now.
func (r *Row) Live(now int64) bool { return r != nil && r.Held && now < r.Expires }

// Record converts a live row to a leasehold.Record.
func (r *Row) Record(now int64) leasehold.Record {
	return leasehold.Record{
		Name: r.Name, Owner: r.Owner, Token: r.Token, Data: r.Data, TTL: r.TTL,
		Remaining: time.Duration(r.Expires - now), Acquired: r.Acquired,
	}
}

// Acquire decides a TryAcquire. cur is the stored row (nil if the name was
// never used). It returns the row to store and the grant, or a *HeldError
// (and no row to store).
func Acquire(cur *Row, req leasehold.AcquireRequest, now int64, wall time.Time) (Row, leasehold.Record, error) {
	if cur.Live(now) {
		if req.RequestID == "" || cur.RequestID != req.RequestID || cur.Owner != req.Owner {
			return Row{}, leasehold.Record{}, &leasehold.HeldError{
				Name: cur.Name, Owner: cur.Owner, Token: cur.Token,
				Remaining: time.Duration(cur.Expires - now), Acquired: cur.Acquired,
			}
		}
		// A retry of the acquire that holds it: same grant, fresh expiry.
		next := *cur
		next.TTL = req.TTL
		next.Expires = now + int64(req.TTL)
		next.Data = req.Data
		return next, next.Record(now), nil
	}
	var token uint64 = 1
	if cur != nil {
		token = cur.Token + 1
	}
	next := Row{
		Name: req.Name, Owner: req.Owner, RequestID: req.RequestID, Token: token,
		Data: req.Data, TTL: req.TTL, Expires: now + int64(req.TTL), Held: true, Acquired: wall,
	}
	return next, next.Record(now), nil
}

// Renew decides a renewal: the row to store, or leasehold.ErrNotHeld.
func Renew(cur *Row, owner string, token uint64, ttl time.Duration, now int64) (Row, error) {
	if !cur.Live(now) || cur.Owner != owner || cur.Token != token {
		return Row{}, leasehold.ErrNotHeld
	}
	next := *cur
	next.TTL = ttl
	next.Expires = now + int64(ttl)
	return next, nil
}

// Release decides a release: the row to store (changed reports whether it
// differs from cur), or leasehold.ErrNotHeld. The holder of the latest
// grant may release it any number of times, also after it expired, as long
// as nobody took it over.
func Release(cur *Row, owner string, token uint64) (next Row, changed bool, err error) {
	if cur == nil || cur.Owner != owner || cur.Token != token {
		return Row{}, false, leasehold.ErrNotHeld
	}
	if !cur.Held {
		return *cur, false, nil
	}
	next = *cur
	next.Held = false
	next.Expires = 0
	return next, true, nil
}
