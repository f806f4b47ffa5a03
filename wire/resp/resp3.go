package resp

import (
	"github.com/leasehold/leasehold"
)

// RESP3 replies. A client that says HELLO 3 gets the leasehold replies as
// maps with labelled fields instead of positional arrays (see
// docs/protocol.md); everything else (simple strings, errors, integers,
// bulk strings) is written as in RESP2, which RESP3 keeps.

// The labels of the fields of a grant, a record and a session in RESP3
// maps, in the order they are written.
var (
	GrantFields   = []string{"token", "ttl_ms", "remaining_ms", "acquired_unix_ms", "data"}
	RecordFields  = []string{"name", "owner", "token", "ttl_ms", "remaining_ms", "acquired_unix_ms", "data"}
	SessionFields = []string{"ttl_ms", "remaining_ms", "leases"}
)

// AppendMap appends the header of a RESP3 map of n pairs ("%n"); the
// caller appends 2n values after it, key then value.
func AppendMap(b []byte, n int) []byte { return appendHeader(b, '%', int64(n)) }

// AppendPush appends the header of a RESP3 push of n elements (">n"): an
// out-of-band message, such as a watch notification.
func AppendPush(b []byte, n int) []byte { return appendHeader(b, '>', int64(n)) }

// AppendNull3 appends RESP3's null ("_").
func AppendNull3(b []byte) []byte { return append(b, '_', '\r', '\n') }

// AppendGrantMap appends the RESP3 reply to a successful LH.ACQUIRE: a map
// of GrantFields.
func AppendGrantMap(b []byte, rec *leasehold.Record) []byte {
	b = AppendMap(b, len(GrantFields))
	return appendGrantPairs(b, rec)
}

// AppendGrantMapSecret appends the RESP3 reply to a successful LH.ACQUIRE
// of a server with holder proofs: GrantFields, then "secret".
func AppendGrantMapSecret(b []byte, rec *leasehold.Record, secret string) []byte {
	b = AppendMap(b, len(GrantFields)+1)
	b = appendGrantPairs(b, rec)
	b = AppendBulkString(b, "secret")
	return AppendBulkString(b, secret)
}

// AppendRecordMap appends a full record in RESP3: a map of RecordFields.
func AppendRecordMap(b []byte, rec *leasehold.Record) []byte {
	b = AppendMap(b, len(RecordFields))
	b = AppendBulkString(b, "name")
	b = AppendBulkString(b, rec.Name)
	b = AppendBulkString(b, "owner")
	b = AppendBulkString(b, rec.Owner)
	return appendGrantPairs(b, rec)
}

func appendGrantPairs(b []byte, rec *leasehold.Record) []byte {
	b = AppendBulkString(b, "token")
	b = AppendInt(b, int64(rec.Token))
	b = AppendBulkString(b, "ttl_ms")
	b = AppendInt(b, Millis(rec.TTL))
	b = AppendBulkString(b, "remaining_ms")
	b = AppendInt(b, CeilMillis(rec.Remaining))
	b = AppendBulkString(b, "acquired_unix_ms")
	b = AppendInt(b, unixMillis(rec.Acquired))
	b = AppendBulkString(b, "data")
	return AppendBulk(b, rec.Data)
}
