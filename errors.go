package leasehold

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Callers branch on them with errors.Is.
var (
	// ErrHeld reports that another owner holds the lease. The error returned
	// is a *HeldError, which matches ErrHeld with errors.Is and carries the
	// holder's details for errors.As.
	ErrHeld = errors.New("lease is held by another owner")
	// ErrNotHeld reports that the caller does not hold the lease it named:
	// it was never granted, it expired and was taken over, it was released,
	// or the owner or token does not match. The store changed nothing.
	ErrNotHeld = errors.New("lease not held")
	// ErrLost reports that a lease can no longer be proven held: a renewal
	// was refused, or the local deadline passed without a confirmed renewal.
	ErrLost = errors.New("lease lost")
	// ErrReleased reports that the lease was released by its holder.
	ErrReleased = errors.New("lease released")
	// ErrNotFound reports that no live lease has that name.
	ErrNotFound = errors.New("no live lease with that name")
	// ErrInvalid is matched (errors.Is) by every *InvalidError.
	ErrInvalid = errors.New("invalid argument")
	// ErrClosed reports use of a store after Close.
	ErrClosed = errors.New("store closed")
)

// HeldError is returned when a lease is held by someone else. It matches
// ErrHeld with errors.Is.
type HeldError struct {
	Name      string        // the lease asked for
	Owner     string        // its current holder
	Token     uint64        // the holder's fencing token
	Remaining time.Duration // time left before it expires, by the store's clock, unless renewed
	Acquired  time.Time     // wall-clock time of the holder's grant (informational)
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("lease %q is held by %q (token %d, expires in %s)",
		e.Name, e.Owner, e.Token, e.Remaining.Round(time.Millisecond))
}

// Is makes errors.Is(err, ErrHeld) true for a *HeldError.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// InvalidError reports an argument that was rejected before anything was
// changed. It matches ErrInvalid with errors.Is.
type InvalidError struct {
	Field  string // which argument: "name", "owner", "ttl", "data", "request id", ...
	Reason string // why it was rejected
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("invalid %s: %s", e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrInvalid) true for an *InvalidError.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

func invalid(field, format string, args ...any) error {
	return &InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}
