// Package resp reads and writes RESP2, the Redis serialization protocol, as
// leasehold's pipelined wire protocol uses it: commands are arrays of bulk
// strings (or inline lines typed into telnet), replies are simple strings,
// errors, integers, bulk strings, nulls and arrays (and, for a client that
// said HELLO 3, the RESP3 maps, nulls and pushes of resp3.go, which the
// server writes and this Reader does not read). It is shared by the
// server (server.RESPServer) and the client (remote.RESPStore), and also
// holds the client's auto-pipelined connections (Client).
//
// The Reader never trusts a length it reads: bulk strings and arrays longer
// than its limits are protocol errors, and memory is only allocated for
// bytes that actually arrive (up to one bulk string's length ahead).
package resp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// Default limits of a Reader.
const (
	DefaultMaxBulk   = 1 << 20 // bytes in one bulk string
	DefaultMaxArray  = 1024    // elements in one array
	DefaultMaxDepth  = 4       // nesting of arrays in a reply
	DefaultMaxInline = 64 << 10
	// DefaultMaxCommand bounds the bytes of all the arguments of one
	// command together (without it, an array of 1024 bulk strings of 1 MiB
	// each would be buffered whole).
	DefaultMaxCommand = 2 << 20
)

// ErrProtocol is matched (errors.Is) by every *ProtocolError.
var ErrProtocol = errors.New("protocol error")

// ErrForeign is returned by ReadCommand of a Reader with StrictInline for
// an inline line that no client of this protocol sends: one that does not
// start with a letter, or holds a control byte or invalid UTF-8 — the
// bytes of another protocol (a TLS ClientHello, whose session ticket an
// attacker can fill with command lines). It matches ErrProtocol too.
var ErrForeign = &ProtocolError{Msg: "bytes of another protocol (an inline line with control bytes, invalid UTF-8 or no command name)"}

// ProtocolError reports malformed input. The connection cannot be read any
// further: the reader has lost its place in the stream.
type ProtocolError struct{ Msg string }

func (e *ProtocolError) Error() string        { return "Protocol error: " + e.Msg }
func (e *ProtocolError) Is(target error) bool { return target == ErrProtocol }

func protoErr(format string, args ...any) error {
	return &ProtocolError{Msg: fmt.Sprintf(format, args...)}
}

// Type is the type of a RESP2 value: its first byte on the wire.
type Type byte

const (
	SimpleString Type = '+'
	Error        Type = '-'
	Integer      Type = ':'
	BulkString   Type = '$'
	Array        Type = '*'
)

// Value is one reply. Its Str and Array share the Reader's buffers and are
// valid only until the Reader's next call.
type Value struct {
	Type  Type
	Null  bool    // a null bulk string ($-1) or null array (*-1)
	Int   int64   // Integer
	Str   []byte  // SimpleString, Error, BulkString
	Array []Value // Array
}

// Reader reads commands (server side) or replies (client side) from a
// buffered stream. It is not safe for concurrent use. Its limit fields may be
// changed before the first read; zero means the default.
type Reader struct {
	br        *bufio.Reader
	MaxBulk   int
	MaxArray  int
	MaxDepth  int
	MaxInline int // longest inline command line; also bounded by the bufio size
	// StrictInline refuses (ErrForeign) an inline line that does not
	// start with an ASCII letter or that holds a control byte other than
	// tab, DEL or invalid UTF-8; blank lines are still allowed.
	StrictInline bool
	// MaxCommand bounds the bytes of one command's arguments together
	// (ReadCommand only); an array whose bulk strings would go over it is
	// refused before they are read.
	MaxCommand int
	// Budget, if set, is asked for the memory of the Reader's buffer
	// (the arguments of the command being read) beyond its first 16 KiB
	// before it is allocated, and given it back when the buffer is
	// dropped: after a command bigger than 16 KiB, at the next read, and
	// at Free. When it refuses, the read fails with ErrBudget before the
	// bytes are read.
	Budget Budget

	held    int       // bytes of buf's capacity reserved from Budget
	buf     []byte    // bytes of the current command or reply
	args    [][]byte  // arguments of the current command
	vals    []Value   // finished arrays of the current reply
	scratch [][]Value // per depth: elements of arrays being read
}

// Budget is memory shared by several Readers, such as a server's total of
// input buffers across its connections.
type Budget interface {
	// Reserve takes n bytes, or takes nothing and reports false.
	Reserve(n int) bool
	// Release gives back n bytes that Reserve took.
	Release(n int)
}

// ErrBudget is returned by a read for which the Reader's Budget refused
// the buffer. Nothing of the command has been returned; the stream cannot
// be read any further.
var ErrBudget = errors.New("input buffer budget exhausted")

// budgetKeep is the largest buffer a Reader with a Budget keeps between
// commands (without one: 256 KiB).
const budgetKeep = 16 << 10

// NewReader reads from br.
func NewReader(br *bufio.Reader) *Reader { return &Reader{br: br} }

// Buffered returns how many bytes can be read without blocking.
func (r *Reader) Buffered() int { return r.br.Buffered() }

func (r *Reader) limits() (bulk, array, depth, inline int) {
	bulk, array, depth, inline = r.MaxBulk, r.MaxArray, r.MaxDepth, r.MaxInline
	if bulk <= 0 {
		bulk = DefaultMaxBulk
	}
	if array <= 0 {
		array = DefaultMaxArray
	}
	if depth <= 0 {
		depth = DefaultMaxDepth
	}
	if inline <= 0 {
		inline = DefaultMaxInline
	}
	return
}

func (r *Reader) reset() {
	// Drop buffers a large value grew, so an idle connection keeps little.
	keep := 256 << 10
	if r.Budget != nil {
		keep = budgetKeep
	}
	if cap(r.buf) > keep {
		r.Free()
	}
	if cap(r.vals) > 64<<10 {
		r.vals = nil
	}
	r.buf, r.args, r.vals = r.buf[:0], r.args[:0], r.vals[:0]
}

// line reads through the next '\n' and returns the line without "\r\n"
// (or a bare "\n" when crlf is false). The result is valid until the next
// read from the bufio.Reader.
func (r *Reader) line(crlf bool) ([]byte, error) {
	b, cr, err := r.rawLine()
	if err == nil && crlf && !cr {
		err = protoErr("line not terminated by CRLF")
	}
	return b, err
}

// rawLine is line that reports whether the line ended in "\r\n".
func (r *Reader) rawLine() (b []byte, cr bool, err error) {
	b, err = r.br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			// No '\n' fills the buffer: the line, without its CRLF, is
			// longer than the buffer less two.
			return nil, false, protoErr("line longer than %d bytes", r.br.Size()-2)
		}
		if err == io.EOF && len(b) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, false, err
	}
	n := len(b) - 1
	if n > 0 && b[n-1] == '\r' {
		return b[:n-1], true, nil
	}
	return b[:n], false, nil
}

// awaitLine waits until the next line is buffered whole, and refuses it
// as soon as max+2 bytes have come without a line end, without waiting for
// (or reading) more (limit+2 bytes: the line and its CRLF): a limit below the buffer's size (1 KiB before AUTH)
// holds as it is documented, not at the buffer's 16 KiB. Errors of the
// connection are left to the read that follows.
func (r *Reader) awaitLine(limit int) error {
	if limit+2 >= r.br.Size() {
		return nil // the buffer's own bound is the limit
	}
	// Look at every byte buffered, then wait for one more, until a line
	// end or limit+2 bytes.
	for n := max(r.br.Buffered(), 1); ; {
		p, err := r.br.Peek(min(n, limit+2))
		if bytes.IndexByte(p, '\n') >= 0 {
			return nil
		}
		if len(p) >= limit+2 {
			return protoErr("line longer than %d bytes", limit)
		}
		if err != nil {
			return nil
		}
		n = max(r.br.Buffered(), len(p)+1)
	}
}

// ParseInt parses a decimal int64 with an optional '-' sign and no other
// characters, without allocating.
func ParseInt(b []byte) (int64, bool) {
	neg := false
	if len(b) > 0 && b[0] == '-' {
		neg, b = true, b[1:]
	}
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	if neg {
		if n > 1<<63 {
			return 0, false
		}
		return -int64(n), true
	}
	if n > 1<<63-1 {
		return 0, false
	}
	return int64(n), true
}

// length parses the length in a '*' or '$' header line.
func length(line []byte, max int, what string) (int, error) {
	n, ok := ParseInt(line[1:])
	switch {
	case !ok:
		return 0, protoErr("invalid %s length %q", what, truncate(line[1:]))
	case n < -1:
		return 0, protoErr("invalid %s length %d", what, n)
	case n > int64(max):
		return 0, protoErr("%s length %d is over the limit of %d", what, n, max)
	}
	return int(n), nil
}

func truncate(b []byte) []byte {
	if len(b) > 32 {
		return b[:32]
	}
	return b
}

// Free drops the Reader's buffer and gives its bytes back to Budget. Call
// it when done with a Reader that has a Budget; the Reader stays usable.
func (r *Reader) Free() {
	if r.held > 0 {
		r.Budget.Release(r.held)
		r.held = 0
	}
	r.buf = nil
}

// grow makes room for n more bytes in r.buf, reserving the growth from
// Budget first.
func (r *Reader) grow(n int) error {
	start := len(r.buf)
	if cap(r.buf)-start >= n {
		return nil
	}
	size := max(2*cap(r.buf), start+n)
	if r.Budget != nil {
		// The first budgetKeep bytes of a buffer are not counted: what
		// every connection keeps between commands (bounded by the
		// number of connections), so that a small command (an AUTH, a
		// PING) is never refused for want of budget.
		if delta := max(size-budgetKeep, 0) - r.held; delta > 0 {
			if !r.Budget.Reserve(delta) {
				return ErrBudget
			}
			r.held += delta
		}
	}
	nb := make([]byte, start, size)
	copy(nb, r.buf)
	r.buf = nb
	return nil
}

// bulk reads n bytes and their CRLF into r.buf and returns them.
func (r *Reader) bulk(n int) ([]byte, error) {
	start := len(r.buf)
	if err := r.grow(n + 2); err != nil {
		return nil, err
	}
	r.buf = r.buf[:start+n+2]
	if _, err := io.ReadFull(r.br, r.buf[start:]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if r.buf[start+n] != '\r' || r.buf[start+n+1] != '\n' {
		return nil, protoErr("bulk string not terminated by CRLF")
	}
	r.buf = r.buf[:start+n]
	return r.buf[start : start+n : start+n], nil
}

// ReadCommand reads one command: an array of bulk strings, or an inline
// command (a line of words separated by spaces). The arguments share the
// Reader's buffer and are valid until its next call. An empty array or
// blank line gives no arguments and no error. Any error leaves the stream
// unusable; a *ProtocolError should be reported to the peer before the
// connection is closed.
func (r *Reader) ReadCommand() ([][]byte, error) {
	r.reset()
	maxBulk, maxArray, _, maxInline := r.limits()
	maxCommand := r.MaxCommand
	if maxCommand <= 0 {
		maxCommand = DefaultMaxCommand
	}
	if err := r.awaitLine(maxInline); err != nil {
		return nil, err
	}
	line, cr, err := r.rawLine()
	if err != nil {
		return nil, err
	}
	if len(line) == 0 || line[0] != '*' {
		if r.StrictInline && !plausibleInline(line) {
			return nil, ErrForeign
		}
		if len(line) > maxInline {
			return nil, protoErr("inline command longer than %d bytes", maxInline)
		}
		return r.inline(line, maxArray)
	}
	if !cr {
		return nil, protoErr("line not terminated by CRLF")
	}
	n, err := length(line, maxArray, "multibulk")
	if err != nil || n <= 0 {
		return nil, err
	}
	for i := 0; i < n; i++ {
		line, err := r.line(true)
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if len(line) == 0 || line[0] != '$' {
			if len(line) == 0 {
				return nil, protoErr("expected '$', got an empty line")
			}
			return nil, protoErr("expected '$', got '%c'", line[0])
		}
		l, err := length(line, maxBulk, "bulk")
		if err != nil {
			return nil, err
		}
		if l < 0 {
			return nil, protoErr("null bulk string in a command")
		}
		if len(r.buf)+l > maxCommand {
			return nil, protoErr("command longer than %d bytes", maxCommand)
		}
		arg, err := r.bulk(l)
		if err != nil {
			return nil, err
		}
		r.args = append(r.args, arg)
	}
	return r.args, nil
}

// plausibleInline reports whether line (without its line end) could be
// an inline command typed by a person or sent by a client: blank, or
// starting with an ASCII letter, in valid UTF-8 with no control byte but
// tab.
func plausibleInline(line []byte) bool {
	if len(bytes.TrimRight(line, " \t")) == 0 {
		return true
	}
	if c := line[0]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
		return false
	}
	for _, c := range line {
		if c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return utf8.Valid(line)
}

// PeekByte returns the next byte of the stream without consuming it,
// waiting for it if none is buffered. Like ReadCommand, it ends the
// validity of the previous command's arguments, and first gives back a
// large buffer they used (so that a connection waiting for its next
// command holds little of the Budget).
func (r *Reader) PeekByte() (byte, error) {
	r.reset()
	b, err := r.br.Peek(1)
	if err != nil {
		return 0, err
	}
	return b[0], nil
}

// CanStartCommand reports whether b can be the first byte of a command:
// '*' (an array), an ASCII letter (an inline command) or a line end (a
// blank line). A TLS record starts with 0x16, for one.
func CanStartCommand(b byte) bool {
	return b == '*' || b == '\r' || b == '\n' || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z'
}

func (r *Reader) inline(line []byte, maxArgs int) ([][]byte, error) {
	if err := r.grow(len(line)); err != nil {
		return nil, err
	}
	r.buf = append(r.buf, line...)
	b := r.buf
	for i := 0; i < len(b); {
		for i < len(b) && (b[i] == ' ' || b[i] == '\t') {
			i++
		}
		j := i
		for j < len(b) && b[j] != ' ' && b[j] != '\t' {
			j++
		}
		if j > i {
			if len(r.args) == maxArgs {
				return nil, protoErr("inline command has more than %d arguments", maxArgs)
			}
			r.args = append(r.args, b[i:j:j])
		}
		i = j
	}
	return r.args, nil
}

// ReadValue reads one reply. Its byte slices and arrays share the Reader's
// buffers and are valid until its next call. Nested arrays deeper than
// MaxDepth are a protocol error.
func (r *Reader) ReadValue() (Value, error) {
	r.reset()
	return r.value(0)
}

func (r *Reader) value(depth int) (Value, error) {
	maxBulk, maxArray, maxDepth, _ := r.limits()
	line, err := r.line(true)
	if err != nil {
		if err == io.EOF && depth > 0 {
			err = io.ErrUnexpectedEOF
		}
		return Value{}, err
	}
	if len(line) == 0 {
		return Value{}, protoErr("empty line where a value was expected")
	}
	switch t := Type(line[0]); t {
	case SimpleString, Error:
		start := len(r.buf)
		if err := r.grow(len(line) - 1); err != nil {
			return Value{}, err
		}
		r.buf = append(r.buf, line[1:]...)
		return Value{Type: t, Str: r.buf[start:len(r.buf):len(r.buf)]}, nil
	case Integer:
		n, ok := ParseInt(line[1:])
		if !ok {
			return Value{}, protoErr("invalid integer %q", truncate(line[1:]))
		}
		return Value{Type: t, Int: n}, nil
	case BulkString:
		n, err := length(line, maxBulk, "bulk")
		if err != nil {
			return Value{}, err
		}
		if n < 0 {
			return Value{Type: t, Null: true}, nil
		}
		b, err := r.bulk(n)
		if err != nil {
			return Value{}, err
		}
		return Value{Type: t, Str: b}, nil
	case Array:
		n, err := length(line, maxArray, "array")
		if err != nil {
			return Value{}, err
		}
		if n < 0 {
			return Value{Type: t, Null: true}, nil
		}
		if n > 0 && depth+1 >= maxDepth {
			return Value{}, protoErr("arrays nested deeper than %d", maxDepth)
		}
		for len(r.scratch) <= depth {
			r.scratch = append(r.scratch, nil)
		}
		mark := len(r.scratch[depth])
		for i := 0; i < n; i++ {
			v, err := r.value(depth + 1)
			if err != nil {
				r.scratch[depth] = r.scratch[depth][:mark]
				return Value{}, err
			}
			r.scratch[depth] = append(r.scratch[depth], v)
		}
		// Move the finished elements to r.vals. Earlier arrays stay valid
		// when r.vals grows: they keep the old backing array.
		start := len(r.vals)
		r.vals = append(r.vals, r.scratch[depth][mark:]...)
		r.scratch[depth] = r.scratch[depth][:mark]
		return Value{Type: t, Array: r.vals[start:len(r.vals):len(r.vals)]}, nil
	default:
		return Value{}, protoErr("unknown reply type '%c'", line[0])
	}
}
