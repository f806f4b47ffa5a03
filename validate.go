package leasehold

import (
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits on what a lease may carry. Every store enforces them, so a request
// that breaks one is rejected with an *InvalidError before anything changes.
const (
	// MaxNameLen is the longest lease name, in bytes of UTF-8.
	MaxNameLen = 256
	// MaxOwnerLen is the longest owner identity, in bytes of UTF-8.
	MaxOwnerLen = 256
	// MaxRequestIDLen is the longest acquire request id, in bytes.
	MaxRequestIDLen = 128
	// MaxDataLen is the largest data payload a lease may carry, in bytes.
	MaxDataLen = 64 << 10
	// MinTTL is the shortest lease TTL accepted.
	MinTTL = 10 * time.Millisecond
	// MaxTTL is the longest lease TTL accepted. Longer jobs keep a shorter
	// lease alive instead: a crashed holder then frees it sooner.
	MaxTTL = 24 * time.Hour
)

// ValidateName checks a lease name: 1 to MaxNameLen bytes of valid UTF-8
// with no control characters (Unicode category Cc, which includes NUL, tab
// and newline). Names are compared byte for byte and never normalised, so
// "é" written precomposed and decomposed are two different names.
func ValidateName(name string) error { return validateText("name", name, MaxNameLen) }

// ValidatePrefix checks a prefix for List: like a name, but it may be empty.
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	return validateText("prefix", prefix, MaxNameLen)
}

// ValidateOwner checks an owner identity with the same rules as a name.
func ValidateOwner(owner string) error { return validateText("owner", owner, MaxOwnerLen) }

// ValidateRequestID checks an acquire request id: empty (no retry
// recognition) or up to MaxRequestIDLen bytes of printable UTF-8.
func ValidateRequestID(id string) error {
	if id == "" {
		return nil
	}
	return validateText("request id", id, MaxRequestIDLen)
}

// ValidateTTL checks that ttl lies within [MinTTL, MaxTTL].
func ValidateTTL(ttl time.Duration) error {
	if ttl < MinTTL || ttl > MaxTTL {
		return invalid("ttl", "%s is outside the allowed range [%s, %s]", ttl, MinTTL, MaxTTL)
	}
	return nil
}

// ValidateData checks that data is at most MaxDataLen bytes.
func ValidateData(data []byte) error {
	if len(data) > MaxDataLen {
		return invalid("data", "%d bytes is more than the limit of %d", len(data), MaxDataLen)
	}
	return nil
}

// ValidateToken checks a fencing token given back to renew or release.
// Tokens start at 1.
func ValidateToken(token uint64) error {
	if token == 0 {
		return invalid("token", "0 is never granted; tokens start at 1")
	}
	return nil
}

func validateText(field, s string, max int) error {
	switch {
	case s == "":
		return invalid(field, "must not be empty")
	case len(s) > max:
		return invalid(field, "%d bytes is longer than the limit of %d", len(s), max)
	case !utf8.ValidString(s):
		return invalid(field, "%q is not valid UTF-8", s)
	}
	for i, r := range s {
		if unicode.IsControl(r) {
			return invalid(field, "control character %U at byte %d", r, i)
		}
	}
	return nil
}

// Validate checks every field of an acquire request.
func (r AcquireRequest) Validate() error {
	if err := ValidateName(r.Name); err != nil {
		return err
	}
	if err := ValidateOwner(r.Owner); err != nil {
		return err
	}
	if err := ValidateRequestID(r.RequestID); err != nil {
		return err
	}
	if err := ValidateTTL(r.TTL); err != nil {
		return err
	}
	return ValidateData(r.Data)
}

// ValidateHolder checks the arguments of Renew and Release.
func ValidateHolder(name, owner string, token uint64) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	if err := ValidateOwner(owner); err != nil {
		return err
	}
	return ValidateToken(token)
}
