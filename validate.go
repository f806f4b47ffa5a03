package leasehold

import (
	"time"

	"github.com/leasehold/leasehold/internal/check"
)

// Limits on what a lease may carry. Every store enforces them, so a request
// that breaks one is rejected with an *InvalidError before anything changes.
// Store authors check them with package storekit.
const (
	// MaxNameLen is the longest lease name, in bytes of UTF-8.
	MaxNameLen = check.MaxNameLen
	// MaxOwnerLen is the longest owner identity, in bytes of UTF-8.
	MaxOwnerLen = check.MaxOwnerLen
	// MaxRequestIDLen is the longest acquire request id, in bytes.
	MaxRequestIDLen = check.MaxRequestIDLen
	// MaxDataLen is the largest data payload a lease may carry, in bytes.
	MaxDataLen = check.MaxDataLen
	// MinTTL is the shortest lease TTL accepted.
	MinTTL = check.MinTTL
	// MaxTTL is the longest lease TTL accepted. Longer jobs keep a shorter
	// lease alive instead: a crashed holder then frees it sooner.
	MaxTTL = check.MaxTTL
)

// asInvalid turns a rule's verdict into an *InvalidError, or nil.
func asInvalid(p *check.Problem) error {
	if p == nil {
		return nil
	}
	return &InvalidError{Field: p.Field, Reason: p.Reason}
}

// Validate checks every field of an acquire request: the name and owner (1
// to MaxNameLen and MaxOwnerLen bytes of valid UTF-8 without control
// characters; names are compared byte for byte and never normalised), the
// request id (empty or up to MaxRequestIDLen bytes), the TTL (within
// [MinTTL, MaxTTL]) and the data (at most MaxDataLen bytes).
func (r AcquireRequest) Validate() error {
	for _, p := range []*check.Problem{check.Name(r.Name), check.Owner(r.Owner),
		check.RequestID(r.RequestID), check.TTL(r.TTL), check.Data(r.Data)} {
		if p != nil {
			return asInvalid(p)
		}
	}
	return nil
}

// The store-author helpers below moved to package storekit. They stay here
// for the callers in this module that have not switched yet and will be
// removed.

// ValidateName checks a lease name.
//
// Deprecated: use storekit.ValidateName.
func ValidateName(name string) error { return asInvalid(check.Name(name)) }

// ValidatePrefix checks a prefix for List.
//
// Deprecated: use storekit.ValidatePrefix.
func ValidatePrefix(prefix string) error { return asInvalid(check.Prefix(prefix)) }

// ValidateOwner checks an owner identity.
//
// Deprecated: use storekit.ValidateOwner.
func ValidateOwner(owner string) error { return asInvalid(check.Owner(owner)) }

// ValidateRequestID checks an acquire request id.
//
// Deprecated: use storekit.ValidateRequestID.
func ValidateRequestID(id string) error { return asInvalid(check.RequestID(id)) }

// ValidateTTL checks that ttl lies within [MinTTL, MaxTTL].
//
// Deprecated: use storekit.ValidateTTL.
func ValidateTTL(ttl time.Duration) error { return asInvalid(check.TTL(ttl)) }

// ValidateData checks that data is at most MaxDataLen bytes.
//
// Deprecated: use storekit.ValidateData.
func ValidateData(data []byte) error { return asInvalid(check.Data(data)) }

// ValidateHolder checks the arguments of Renew and Release.
//
// Deprecated: use storekit.ValidateHolder.
func ValidateHolder(name, owner string, token uint64) error {
	return asInvalid(check.Holder(name, owner, token))
}

// ValidateKey checks a record key with the rules of lease names.
//
// Deprecated: use storekit.ValidateKey.
func ValidateKey(key string) error { return asInvalid(check.Key(key)) }

// ValidateValue checks a record value's size.
//
// Deprecated: use storekit.ValidateValue.
func ValidateValue(v []byte) error { return asInvalid(check.Value(v)) }

// ParseCounter parses a counter's value.
//
// Deprecated: use storekit.ParseCounter.
func ParseCounter(key string, value []byte) (int64, error) {
	n, p := check.Counter(key, value)
	return n, asInvalid(p)
}

// AddInt64 adds delta to n, or returns an *InvalidError on overflow.
//
// Deprecated: use storekit.AddInt64.
func AddInt64(key string, n, delta int64) (int64, error) {
	s, p := check.Add(key, n, delta)
	return s, asInvalid(p)
}
