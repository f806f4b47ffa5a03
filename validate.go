package leasehold

import (
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
