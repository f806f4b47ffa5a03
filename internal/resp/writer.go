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
func AppendInt(b []byte, n int64) []byte {
	b = append(b, ':')
	b = strconv.AppendInt(b, n, 10)
	return append(b, '\r', '\n')
}

// AppendBulk appends a bulk string. A nil p is still an empty string, not a
// null; use AppendNull for that.
func AppendBulk(b []byte, p []byte) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(p)), 10)
	b = append(b, '\r', '\n')
	b = append(b, p...)
	return append(b, '\r', '\n')
}

// AppendBulkString appends s as a bulk string.
func AppendBulkString(b []byte, s string) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, '\r', '\n')
	b = append(b, s...)
	return append(b, '\r', '\n')
}

// AppendBulkInt appends the decimal form of n as a bulk string, as command
// arguments carry numbers.
func AppendBulkInt(b []byte, n int64) []byte {
	var tmp [20]byte
	d := strconv.AppendInt(tmp[:0], n, 10)
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(d)), 10)
	b = append(b, '\r', '\n')
	b = append(b, d...)
	return append(b, '\r', '\n')
}

// AppendNull appends a null bulk string ("$-1").
func AppendNull(b []byte) []byte { return append(b, '$', '-', '1', '\r', '\n') }

// AppendNullArray appends a null array ("*-1").
func AppendNullArray(b []byte) []byte { return append(b, '*', '-', '1', '\r', '\n') }

// AppendArray appends the header of an array of n elements; the caller
// appends the n elements after it.
func AppendArray(b []byte, n int) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '\r', '\n')
}

// AppendCommand appends a command of string arguments (an array of bulk
// strings).
func AppendCommand(b []byte, args ...string) []byte {
	b = AppendArray(b, len(args))
	for _, a := range args {
		b = AppendBulkString(b, a)
	}
	return b
}
