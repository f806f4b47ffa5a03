// Package storekit is for authors of stores: the checks every store makes
// on its arguments before it changes anything, and the counter arithmetic
// of versioned records. Callers of leases and records do not need it; they
// use package leasehold, whose Client validates the same rules.
//
// A store validates each request and returns the *leasehold.InvalidError
// these functions give, unchanged, so that errors.Is(err,
// leasehold.ErrInvalid) holds and the Field names the argument:
//
//	func (s *Store) Renew(ctx context.Context, name, owner string, token uint64, ttl time.Duration) error {
//		if err := storekit.ValidateRenew(name, owner, token, ttl); err != nil {
//			return err
//		}
//		...
//	}
//
// TryAcquire validates with leasehold.AcquireRequest.Validate, and a
// record store's Txn with leasehold.Txn.Validate. The limits themselves
// (leasehold.MaxNameLen, MaxTTL, MaxValueLen, ...) are in package leasehold.
// The conformance suite in package storetest checks that a store rejects
// what these functions reject.
package storekit

import (
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/check"
)

// invalid is the first of the problems as an *leasehold.InvalidError, or
// nil if there is none.
func invalid(ps ...*check.Problem) error {
	for _, p := range ps {
		if p != nil {
			return &leasehold.InvalidError{Field: p.Field, Reason: p.Reason}
		}
	}
	return nil
}

// ValidateName checks a lease name: 1 to leasehold.MaxNameLen bytes of
// valid UTF-8 with no control characters (Unicode category Cc, which
// includes NUL, tab and newline). Names are compared byte for byte and
// never normalised, so "é" written precomposed and decomposed are two
// different names.
func ValidateName(name string) error { return invalid(check.Name(name)) }

// ValidatePrefix checks a prefix for List: like a name, but it may be empty.
func ValidatePrefix(prefix string) error { return invalid(check.Prefix(prefix)) }

// ValidateOwner checks an owner identity with the same rules as a name
// (at most leasehold.MaxOwnerLen bytes).
func ValidateOwner(owner string) error { return invalid(check.Owner(owner)) }

// ValidateRequestID checks an acquire request id: empty (no retry
// recognition) or up to leasehold.MaxRequestIDLen bytes of printable UTF-8.
func ValidateRequestID(id string) error { return invalid(check.RequestID(id)) }

// ValidateTTL checks that ttl lies within [leasehold.MinTTL,
// leasehold.MaxTTL].
func ValidateTTL(ttl time.Duration) error { return invalid(check.TTL(ttl)) }

// ValidateData checks that a lease's data is at most leasehold.MaxDataLen
// bytes.
func ValidateData(data []byte) error { return invalid(check.Data(data)) }

// ValidateToken checks a fencing token given back to renew or release.
// Tokens start at 1.
func ValidateToken(token uint64) error { return invalid(check.Token(token)) }

// ValidateHolder checks the arguments of Renew and Release: the name, the
// owner and the token.
func ValidateHolder(name, owner string, token uint64) error {
	return invalid(check.Holder(name, owner, token))
}

// ValidateRenew checks the arguments of Renew: those of ValidateHolder,
// then the TTL.
func ValidateRenew(name, owner string, token uint64, ttl time.Duration) error {
	return invalid(check.Holder(name, owner, token), check.TTL(ttl))
}

// ValidateKey checks a record key with the rules of lease names.
func ValidateKey(key string) error { return invalid(check.Key(key)) }

// ValidateValue checks that a record value is at most
// leasehold.MaxValueLen bytes.
func ValidateValue(v []byte) error { return invalid(check.Value(v)) }

// ValidatePut checks the arguments of PutRecord: the key, then the value.
func ValidatePut(key string, value []byte) error {
	return invalid(check.Key(key), check.Value(value))
}

// ParseCounter parses the value of the counter record at key, a decimal
// int64 ("42"), or returns an *leasehold.InvalidError if it is not one.
func ParseCounter(key string, value []byte) (int64, error) {
	n, p := check.Counter(key, value)
	return n, invalid(p)
}

// AddInt64 adds delta to the counter n at key, or returns an
// *leasehold.InvalidError on overflow.
func AddInt64(key string, n, delta int64) (int64, error) {
	s, p := check.Add(key, n, delta)
	return s, invalid(p)
}
