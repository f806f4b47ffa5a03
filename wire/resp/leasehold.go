package resp

import (
	"bytes"
	"fmt"
	"strconv"
	"time"

	"github.com/leasehold/leasehold"
)

// This file holds the leasehold commands' reply and error formats, so that
// the server's encoding and the client's decoding live side by side. See
// docs/protocol.md.

// Error codes: the first word of an error reply.
const (
	CodeHeld        = "HELD"        // HELD <token> <remaining_ms> <acquired_unix_ms> <owner>
	CodeNotHeld     = "NOTHELD"     // the caller does not hold the lease
	CodeNotFound    = "NOTFOUND"    // no live lease with that name
	CodeInvalid     = "INVALID"     // INVALID <field>: <reason>
	CodeNoSession   = "NOSESSION"   // unknown, closed or expired session
	CodeNoAuth      = "NOAUTH"      // authenticate first
	CodeWrongPass   = "WRONGPASS"   // AUTH with an unknown token
	CodeNoPerm      = "NOPERM"      // the identity may not do that on that name
	CodeRateLimited = "RATELIMITED" // over the identity's rate limit; nothing changed
	CodeBadProof    = "BADPROOF"    // renew or release without the grant's secret; nothing changed
	CodeTooMany     = "TOOMANY"     // LH.LIST over the server's cap: page with LH.SCAN
	CodeQuota       = "QUOTA"       // the client is at a quota of the server (leases, data, sessions, waiters); nothing changed
	CodeErr         = "ERR"         // anything else
)

// GrantLen and RecordLen are the lengths of the arrays describing a grant
// (the reply to LH.ACQUIRE) and a full record (LH.GET, LH.LIST,
// LH.FORCERELEASE): token, ttl_ms, remaining_ms, acquired_unix_ms, data,
// and for a record also name and owner. A server with holder proofs
// answers LH.ACQUIRE with GrantSecretLen elements: the grant's, then its
// secret (the proof of holding it that LH.RENEW and LH.RELEASE take as
// SECRET).
const (
	GrantLen       = 5
	GrantSecretLen = 6
	RecordLen      = 7
)

// Millis is d in whole milliseconds, truncated.
func Millis(d time.Duration) int64 { return int64(d / time.Millisecond) }

// CeilMillis is d in milliseconds rounded up, so that a live lease with
// less than a millisecond left never reads as 0; it is 0 for d <= 0.
func CeilMillis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

func unixMillis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromUnixMillis(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// AppendGrant appends the reply to a successful LH.ACQUIRE.
func AppendGrant(b []byte, rec *leasehold.Record) []byte {
	b = AppendArray(b, GrantLen)
	return appendGrantFields(b, rec)
}

// AppendGrantSecret appends the reply to a successful LH.ACQUIRE of a
// server with holder proofs: the grant's fields, then its secret.
func AppendGrantSecret(b []byte, rec *leasehold.Record, secret string) []byte {
	b = AppendArray(b, GrantSecretLen)
	b = appendGrantFields(b, rec)
	return AppendBulkString(b, secret)
}

func appendGrantFields(b []byte, rec *leasehold.Record) []byte {
	b = AppendInt(b, int64(rec.Token))
	b = AppendInt(b, Millis(rec.TTL))
	b = AppendInt(b, CeilMillis(rec.Remaining))
	b = AppendInt(b, unixMillis(rec.Acquired))
	return AppendBulk(b, rec.Data)
}

// AppendRecord appends a full record: the grant's fields, then name and
// owner.
func AppendRecord(b []byte, rec *leasehold.Record) []byte {
	b = AppendArray(b, RecordLen)
	b = appendGrantFields(b, rec)
	b = AppendBulkString(b, rec.Name)
	return AppendBulkString(b, rec.Owner)
}

// DecodeRecord decodes a grant (with or without its secret, which it
// drops) or a full record into rec. A grant leaves rec's Name and Owner as
// they are (the caller knows them). Data is copied; empty data decodes as
// nil.
func DecodeRecord(v Value, rec *leasehold.Record) error {
	_, err := decodeRecord(v, rec)
	return err
}

// DecodeGrant decodes the reply to LH.ACQUIRE into rec (as DecodeRecord)
// and returns the grant's secret: "" from a server without holder proofs
// (a reply of GrantLen elements).
func DecodeGrant(v Value, rec *leasehold.Record) (secret string, err error) {
	if v.Type == Array && len(v.Array) == RecordLen {
		return "", fmt.Errorf("unexpected reply: want an array of %d or %d elements, got %s", GrantLen, GrantSecretLen, describe(v))
	}
	return decodeRecord(v, rec)
}

func decodeRecord(v Value, rec *leasehold.Record) (secret string, err error) {
	if v.Type != Array || (len(v.Array) != GrantLen && len(v.Array) != GrantSecretLen && len(v.Array) != RecordLen) {
		return "", fmt.Errorf("unexpected reply: want an array of %d, %d or %d elements, got %s", GrantLen, GrantSecretLen, RecordLen, describe(v))
	}
	a := v.Array
	for i := 0; i < 4; i++ {
		if a[i].Type != Integer || a[i].Int < 0 {
			return "", fmt.Errorf("unexpected reply: element %d is %s, want a non-negative integer", i, describe(a[i]))
		}
	}
	for i := 4; i < len(a); i++ {
		if a[i].Type != BulkString || a[i].Null {
			return "", fmt.Errorf("unexpected reply: element %d is %s, want a bulk string", i, describe(a[i]))
		}
	}
	rec.Token = uint64(a[0].Int)
	rec.TTL = time.Duration(a[1].Int) * time.Millisecond
	rec.Remaining = time.Duration(a[2].Int) * time.Millisecond
	rec.Acquired = fromUnixMillis(a[3].Int)
	rec.Data = nil
	if len(a[4].Str) > 0 {
		rec.Data = bytes.Clone(a[4].Str)
	}
	switch len(a) {
	case GrantSecretLen:
		secret = string(a[5].Str)
	case RecordLen:
		rec.Name = string(a[5].Str)
		rec.Owner = string(a[6].Str)
	}
	return secret, nil
}

func describe(v Value) string {
	switch {
	case v.Null:
		return "null"
	case v.Type == Array:
		return fmt.Sprintf("an array of %d", len(v.Array))
	case v.Type == Integer:
		return "an integer"
	case v.Type == Error:
		return fmt.Sprintf("error %q", truncate(v.Str))
	case v.Type == SimpleString:
		return fmt.Sprintf("status %q", truncate(v.Str))
	}
	return "a bulk string"
}

// AppendHeld appends "-HELD <token> <remaining_ms> <acquired_unix_ms>
// <owner>". The owner comes last because it may contain spaces (never CR
// or LF: owners are validated).
func AppendHeld(b []byte, e *leasehold.HeldError) []byte {
	b = append(b, '-')
	b = append(b, CodeHeld...)
	b = append(b, ' ')
	b = strconv.AppendUint(b, e.Token, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, CeilMillis(e.Remaining), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, unixMillis(e.Acquired), 10)
	b = append(b, ' ')
	return appendLine(b, e.Owner)
}

// AppendInvalid appends "-INVALID <field>: <reason>".
func AppendInvalid(b []byte, e *leasehold.InvalidError) []byte {
	b = append(b, '-')
	b = append(b, CodeInvalid...)
	b = append(b, ' ')
	return appendLine(b, e.Field+": "+e.Reason)
}

// ServerError is an error reply that has no leasehold error of its own
// (NOAUTH, NOPERM, RATELIMITED, ERR, ...).
type ServerError struct {
	Code string // first word, e.g. "NOPERM"
	Msg  string // the whole message, code included
}

func (e *ServerError) Error() string { return e.Msg }

// ParseError turns an error reply into an error: a *leasehold.HeldError
// (with Name set to name), leasehold.ErrNotHeld, leasehold.ErrNotFound, a
// *leasehold.InvalidError, or a *ServerError for every other code.
func ParseError(msg []byte, name string) error {
	code, rest, _ := bytes.Cut(msg, []byte{' '})
	switch string(code) {
	case CodeHeld:
		var f [3]int64
		for i := range f {
			var w []byte
			w, rest, _ = bytes.Cut(rest, []byte{' '})
			n, ok := ParseInt(w)
			if !ok || n < 0 {
				return &ServerError{Code: CodeHeld, Msg: "malformed HELD reply: " + string(msg)}
			}
			f[i] = n
		}
		return &leasehold.HeldError{
			Name:      name,
			Token:     uint64(f[0]),
			Remaining: time.Duration(f[1]) * time.Millisecond,
			Acquired:  fromUnixMillis(f[2]),
			Owner:     string(rest),
		}
	case CodeNotHeld:
		return leasehold.ErrNotHeld
	case CodeNotFound:
		return leasehold.ErrNotFound
	case CodeInvalid:
		field, reason, ok := bytes.Cut(rest, []byte(": "))
		if !ok {
			field, reason = []byte("argument"), rest
		}
		return &leasehold.InvalidError{Field: string(field), Reason: string(reason)}
	}
	return &ServerError{Code: string(code), Msg: string(msg)}
}
