// Package httpwire is the wire format of the leasehold server's HTTP API
// (docs/http-api.md, docs/openapi.yaml), written once for both of its
// ends: the server decodes requests and encodes answers with it, and the
// Go client (package remote) encodes requests and decodes answers with
// it. It has the request bodies, the answers' shapes, the problem
// documents and their type names, and the conversions both ends share:
// durations as whole milliseconds, times as RFC 3339, byte strings as
// text or base64, and leasehold's records and errors to and from JSON.
// (The Python client has its own copy; the API guide is what it follows.)
//
// Every field's JSON name is the API's; a field with omitempty is left out
// of what is sent when it is empty, and decoding ignores omitempty, so one
// type serves both directions. The server decodes bodies strictly
// (unknown, duplicate or case-variant keys are refused): a body type must
// not have members that a request cannot send.
package httpwire

import (
	"encoding/base64"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/leasehold/leasehold"
)

// MS converts a _ms field to a duration, saturating so that an absurd
// value is refused by validation instead of overflowing into a valid one.
func MS(ms int64) time.Duration {
	const lim = int64(1<<63-1) / int64(time.Millisecond)
	switch {
	case ms > lim:
		return time.Duration(1<<63 - 1)
	case ms < -lim:
		return time.Duration(-1 << 63)
	}
	return time.Duration(ms) * time.Millisecond
}

// CeilMS rounds a duration up to whole milliseconds: a TTL is never sent
// or reported shorter than it is (the holder computes its deadline from
// it).
func CeilMS(d time.Duration) int64 {
	ms := d / time.Millisecond
	if d%time.Millisecond > 0 {
		ms++
	}
	return int64(ms)
}

// LeftMS is a remaining time in whole milliseconds, rounded down and never
// negative.
func LeftMS(d time.Duration) int64 { return max(0, d.Milliseconds()) }

// Time formats a time field: RFC 3339 in UTC with as many fractional
// digits as needed, or "" for the zero time.
func Time(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// ParseTime parses a time field written by Time ("" is the zero time).
func ParseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	return time.Parse(time.RFC3339Nano, s)
}

// Byte strings travel in a pair of fields, X and X_base64: as a JSON
// string in X when they are text, else base64 in X_base64. The server
// answers with X for any valid UTF-8 (utf8.Valid); the Go client sends X
// only for PlainText, so that control characters are not escaped to six
// bytes each.

// PlainText reports whether b travels well as a JSON string: valid UTF-8
// without control characters.
func PlainText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, c := range b {
		if c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

// EncodeBytes returns the pair of fields for b: b as text when text is
// true, else b in base64.
func EncodeBytes(b []byte, text bool) (s, b64 *string) {
	if text {
		v := string(b)
		return &v, nil
	}
	v := base64.StdEncoding.EncodeToString(b)
	return nil, &v
}

// DecodeBytes reads the pair of fields named field and field_base64. It
// returns nil when neither is set and an *leasehold.InvalidError when both
// are or the base64 is not valid; an empty base64 string is an empty,
// non-nil value.
func DecodeBytes(field string, s, b64 *string) ([]byte, error) {
	switch {
	case s != nil && b64 != nil:
		return nil, &leasehold.InvalidError{Field: field, Reason: fmt.Sprintf("give %s or %s_base64, not both", field, field)}
	case s != nil:
		return []byte(*s), nil
	case b64 != nil:
		b, err := base64.StdEncoding.DecodeString(*b64)
		if err != nil {
			return nil, &leasehold.InvalidError{Field: field + "_base64", Reason: "not valid standard base64: " + err.Error()}
		}
		if b == nil {
			b = []byte{}
		}
		return b, nil
	}
	return nil, nil
}
