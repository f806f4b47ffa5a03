package resp

import "strconv"

// The Append functions encode one RESP2 value at the end of b and return
// the extended buffer; they never allocate beyond growing b. A reply or
// command is built by appending into a reused buffer, then written.

// AppendSimple appends a simple string ("+OK"). CR and LF in s, which the
// protocol cannot carry there, are replaced by spaces.
func AppendSimple(b []byte, s string) []byte {
	b = append(b, '+')
	return appendLine(b, s)
}

// AppendError appends an error ("-CODE message"). CR and LF in s are
// replaced by spaces.
func AppendError(b []byte, s string) []byte {
	b = append(b, '-')
	return appendLine(b, s)
}

func appendLine(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		b = append(b, c)
	}
	return append(b, '\r', '\n')
}

// AppendInt appends an integer (":42").
func AppendInt(b []byte, n int64) []byte { return appendHeader(b, ':', n) }

// AppendBulk appends a bulk string. A nil p is still an empty string, not a
// null; use AppendNull for that.
func AppendBulk(b []byte, p []byte) []byte { return appendBulk(b, p) }

// AppendBulkString appends s as a bulk string.
func AppendBulkString(b []byte, s string) []byte { return appendBulk(b, s) }

// AppendBulkInt appends the decimal form of n as a bulk string, as command
// arguments carry numbers.
func AppendBulkInt(b []byte, n int64) []byte {
	var tmp [20]byte
	return appendBulk(b, strconv.AppendInt(tmp[:0], n, 10))
}

func appendBulk[T []byte | string](b []byte, p T) []byte {
	b = appendHeader(b, '$', int64(len(p)))
	b = append(b, p...)
	return append(b, '\r', '\n')
}

// appendHeader appends a line of a type byte and a decimal number: an
// integer, or the length or count that starts a bulk string, an array, a
// map or a push.
func appendHeader(b []byte, kind byte, n int64) []byte {
	b = append(b, kind)
	b = strconv.AppendInt(b, n, 10)
	return append(b, '\r', '\n')
}

// AppendNull appends a null bulk string ("$-1").
func AppendNull(b []byte) []byte { return append(b, '$', '-', '1', '\r', '\n') }

// AppendNullArray appends a null array ("*-1").
func AppendNullArray(b []byte) []byte { return append(b, '*', '-', '1', '\r', '\n') }

// AppendArray appends the header of an array of n elements; the caller
// appends the n elements after it.
func AppendArray(b []byte, n int) []byte { return appendHeader(b, '*', int64(n)) }

// AppendCommand appends a command of string arguments (an array of bulk
// strings).
func AppendCommand(b []byte, args ...string) []byte {
	b = AppendArray(b, len(args))
	for _, a := range args {
		b = AppendBulkString(b, a)
	}
	return b
}
