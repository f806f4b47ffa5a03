// Package check holds the argument rules that every store enforces: the
// limits on names, owners, request ids, TTLs, data, tokens, record keys and
// values, and counter arithmetic. The root package leasehold uses them to
// validate requests itself, and package storekit exports them to store
// authors; both turn a *Problem into a *leasehold.InvalidError. Keeping the
// rules here lets storekit import the root without the root importing
// storekit.
package check

import (
	"fmt"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"
)

// The limits. The root package re-exports them as leasehold.MaxNameLen and
// so on, where they are documented.
const (
	MaxNameLen      = 256
	MaxOwnerLen     = 256
	MaxRequestIDLen = 128
	MaxDataLen      = 64 << 10
	MinTTL          = 10 * time.Millisecond
	MaxTTL          = 24 * time.Hour
	MaxValueLen     = 64 << 10
)

// Problem is a rejected argument: which one and why. A nil *Problem means
// the argument is valid.
type Problem struct {
	Field  string
	Reason string
}

// Problemf returns a Problem for field with a formatted reason.
func Problemf(field, format string, args ...any) *Problem {
	return &Problem{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Name checks a lease name: 1 to MaxNameLen bytes of valid UTF-8 with no
// control characters (Unicode category Cc).
func Name(name string) *Problem { return text("name", name, MaxNameLen) }

// Prefix checks a List prefix: like a name, but it may be empty.
func Prefix(prefix string) *Problem {
	if prefix == "" {
		return nil
	}
	return text("prefix", prefix, MaxNameLen)
}

// Owner checks an owner identity with the rules of a name.
func Owner(owner string) *Problem { return text("owner", owner, MaxOwnerLen) }

// RequestID checks an acquire request id: empty or up to MaxRequestIDLen
// bytes of printable UTF-8.
func RequestID(id string) *Problem {
	if id == "" {
		return nil
	}
	return text("request id", id, MaxRequestIDLen)
}

// TTL checks that ttl lies within [MinTTL, MaxTTL].
func TTL(ttl time.Duration) *Problem {
	if ttl < MinTTL || ttl > MaxTTL {
		return Problemf("ttl", "%s is outside the allowed range [%s, %s]", ttl, MinTTL, MaxTTL)
	}
	return nil
}

// Data checks that a lease's data is at most MaxDataLen bytes.
func Data(data []byte) *Problem {
	if len(data) > MaxDataLen {
		return Problemf("data", "%d bytes is more than the limit of %d", len(data), MaxDataLen)
	}
	return nil
}

// Token checks a fencing token given back to renew or release: tokens
// start at 1.
func Token(token uint64) *Problem {
	if token == 0 {
		return Problemf("token", "0 is never granted; tokens start at 1")
	}
	return nil
}

// Holder checks the arguments of Renew and Release.
func Holder(name, owner string, token uint64) *Problem {
	if p := Name(name); p != nil {
		return p
	}
	if p := Owner(owner); p != nil {
		return p
	}
	return Token(token)
}

// Key checks a record key with the rules of lease names.
func Key(key string) *Problem { return text("key", key, MaxNameLen) }

// Value checks a record value's size.
func Value(v []byte) *Problem {
	if len(v) > MaxValueLen {
		return Problemf("value", "%d bytes is more than the limit of %d", len(v), MaxValueLen)
	}
	return nil
}

// Counter parses a counter record's value, a decimal int64.
func Counter(key string, value []byte) (int64, *Problem) {
	n, err := strconv.ParseInt(string(value), 10, 64)
	if err != nil {
		return 0, Problemf("value", "record %q is not a counter (a decimal int64)", key)
	}
	return n, nil
}

// Add adds delta to the counter n at key, or reports the overflow.
func Add(key string, n, delta int64) (int64, *Problem) {
	s := n + delta
	if (delta > 0 && s < n) || (delta < 0 && s > n) {
		return 0, Problemf("delta", "adding %d to counter %q (%d) overflows int64", delta, key, n)
	}
	return s, nil
}

func text(field, s string, max int) *Problem {
	switch {
	case s == "":
		return Problemf(field, "must not be empty")
	case len(s) > max:
		return Problemf(field, "%d bytes is longer than the limit of %d", len(s), max)
	case !utf8.ValidString(s):
		return Problemf(field, "%q is not valid UTF-8", s)
	}
	for i, r := range s {
		if unicode.IsControl(r) {
			return Problemf(field, "control character %U at byte %d", r, i)
		}
	}
	return nil
}
