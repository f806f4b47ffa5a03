package resp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

func reader(s string) *Reader { return NewReader(bufio.NewReaderSize(strings.NewReader(s), 4096)) }

func strs(args [][]byte) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = string(a)
	}
	return out
}

func TestReadCommand(t *testing.T) {
	for _, c := range []struct {
		in   string
		want [][]string
	}{
		{"*1\r\n$4\r\nPING\r\n", [][]string{{"PING"}}},
		{"*3\r\n$3\r\nSET\r\n$0\r\n\r\n$5\r\na\r\nb\x00\r\n", [][]string{{"SET", "", "a\r\nb\x00"}}},
		{"PING\r\n", [][]string{{"PING"}}},
		{"PING\n", [][]string{{"PING"}}},
		{"  lh.get  a/b \t x\r\n", [][]string{{"lh.get", "a/b", "x"}}},
		{"\r\n*0\r\n*-1\r\n*1\r\n$1\r\nx\r\n", [][]string{nil, nil, nil, {"x"}}},
		{"*1\r\n$1\r\na\r\n*2\r\n$1\r\nb\r\n$2\r\ncd\r\n", [][]string{{"a"}, {"b", "cd"}}},
	} {
		r := reader(c.in)
		for i, want := range c.want {
			args, err := r.ReadCommand()
			if err != nil {
				t.Fatalf("%q: command %d: %v", c.in, i, err)
			}
			if got := strs(args); fmt.Sprint(got) != fmt.Sprint(want) || len(got) != len(want) {
				t.Errorf("%q: command %d = %q, want %q", c.in, i, got, want)
			}
		}
		if _, err := r.ReadCommand(); err != io.EOF {
			t.Errorf("%q: after the last command: %v, want EOF", c.in, err)
		}
	}
}

func TestReadCommandRejects(t *testing.T) {
	big := fmt.Sprintf("*1\r\n$%d\r\n", DefaultMaxBulk+1)
	for _, in := range []string{
		big,
		fmt.Sprintf("*%d\r\n", DefaultMaxArray+1),
		"*1\r\n$-1\r\n",
		"*1\r\n$-2\r\n",
		"*-2\r\n",
		"*x\r\n",
		"*\r\n",
		"*1\n$1\r\na\r\n",
		"*1\r\n$1\nab\r\n",
		"*1\r\n:1\r\n",
		"*1\r\n\r\n",
		"*1\r\n$1\r\nab\r\n",
		"*1\r\n$99999999999999999999\r\n",
		"*1\r\n$+1\r\na\r\n",
		strings.Repeat("x", 5000) + "\r\n", // longer than the bufio buffer
	} {
		_, err := reader(in).ReadCommand()
		if !errors.Is(err, ErrProtocol) {
			t.Errorf("%.40q: got %v, want a protocol error", in, err)
		}
	}
	for _, in := range []string{"*2\r\n$1\r\na\r\n", "*1\r\n$5\r\nab", "PING"} {
		_, err := reader(in).ReadCommand()
		if err != io.ErrUnexpectedEOF {
			t.Errorf("%q: got %v, want ErrUnexpectedEOF", in, err)
		}
	}
	r := reader("*1\r\n$3\r\nabc\r\n")
	r.MaxBulk = 2
	if _, err := r.ReadCommand(); !errors.Is(err, ErrProtocol) {
		t.Errorf("bulk over MaxBulk: %v", err)
	}
	r = reader("a b c d\r\n")
	r.MaxArray = 3
	if _, err := r.ReadCommand(); !errors.Is(err, ErrProtocol) {
		t.Errorf("inline command over MaxArray: %v", err)
	}
}

func TestValueRoundTrip(t *testing.T) {
	var b []byte
	b = AppendSimple(b, "OK")
	b = AppendError(b, "ERR bad\r\nthing")
	b = AppendInt(b, -42)
	b = AppendBulk(b, []byte("a\r\nb"))
	b = AppendBulk(b, nil)
	b = AppendNull(b)
	b = AppendNullArray(b)
	b = AppendArray(b, 3)
	b = AppendBulkInt(b, 1234567890123)
	b = AppendArray(b, 2)
	b = AppendInt(b, 1)
	b = AppendArray(b, 0)
	b = AppendBulkString(b, "z")
	b = AppendCommand(b, "LH.GET", "x y")
	r := reader(string(b))
	want := []string{
		"+OK", "-ERR bad  thing", ":-42", "$a\r\nb", "$", "$null", "*null",
		"[$1234567890123 [:1 []] $z]", "[$LH.GET $x y]",
	}
	for i, w := range want {
		v, err := r.ReadValue()
		if err != nil {
			t.Fatalf("value %d: %v", i, err)
		}
		if got := show(v); got != w {
			t.Errorf("value %d = %q, want %q", i, got, w)
		}
	}
	// Values of earlier elements survive the reading of later ones.
	var big []byte
	big = AppendArray(big, 300)
	for i := 0; i < 300; i++ {
		big = AppendArray(big, 2)
		big = AppendBulkString(big, strings.Repeat("v", i))
		big = AppendInt(big, int64(i))
	}
	v, err := reader(string(big)).ReadValue()
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range v.Array {
		if len(e.Array) != 2 || string(e.Array[0].Str) != strings.Repeat("v", i) || e.Array[1].Int != int64(i) {
			t.Fatalf("element %d = %s", i, show(e))
		}
	}
}

func show(v Value) string {
	switch {
	case v.Null:
		return string(v.Type) + "null"
	case v.Type == Integer:
		return fmt.Sprintf(":%d", v.Int)
	case v.Type == Array:
		var parts []string
		for _, e := range v.Array {
			parts = append(parts, show(e))
		}
		return "[" + strings.Join(parts, " ") + "]"
	}
	return string(v.Type) + string(v.Str)
}

func TestReadValueRejects(t *testing.T) {
	for _, in := range []string{
		"%1\r\n", "_\r\n", "\r\n", ":x\r\n", ":\r\n", "$-2\r\n",
		"*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", // deeper than DefaultMaxDepth
		"+OK\n",
		fmt.Sprintf("$%d\r\n", DefaultMaxBulk+1),
	} {
		if _, err := reader(in).ReadValue(); !errors.Is(err, ErrProtocol) {
			t.Errorf("%q: got %v, want a protocol error", in, err)
		}
	}
}

func TestParseInt(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "-1": -1, "9223372036854775807": 1<<63 - 1, "-9223372036854775808": -1 << 63} {
		if n, ok := ParseInt([]byte(in)); !ok || n != want {
			t.Errorf("ParseInt(%q) = %d, %v", in, n, ok)
		}
	}
	for _, in := range []string{"", "-", "+1", "1.0", " 1", "9223372036854775808", "-9223372036854775809", "99999999999999999999"} {
		if _, ok := ParseInt([]byte(in)); ok {
			t.Errorf("ParseInt(%q) accepted", in)
		}
	}
}

func TestLeaseholdFormats(t *testing.T) {
	acq := time.UnixMilli(1_790_000_000_123)
	rec := leasehold.Record{Name: "jobs/a b", Owner: "me, myself", Token: 42, Data: []byte{0, 1, '\r', '\n'},
		TTL: 30 * time.Second, Remaining: 1500*time.Millisecond + 1, Acquired: acq}
	var b []byte
	b = AppendGrant(b, &rec)
	b = AppendRecord(b, &rec)
	r := reader(string(b))
	for i := 0; i < 2; i++ {
		v, err := r.ReadValue()
		if err != nil {
			t.Fatal(err)
		}
		got := leasehold.Record{Name: "kept", Owner: "kept"}
		if err := DecodeRecord(v, &got); err != nil {
			t.Fatal(err)
		}
		want := rec
		want.Remaining = 1501 * time.Millisecond // rounded up
		if i == 0 {
			want.Name, want.Owner = "kept", "kept"
		}
		if fmt.Sprint(got) != fmt.Sprint(want) || !got.Acquired.Equal(acq) {
			t.Errorf("decoded %d: %+v, want %+v", i, got, want)
		}
	}

	// A grant with its secret: DecodeRecord drops it, DecodeGrant returns
	// it; DecodeGrant refuses a full record.
	r = reader(string(AppendGrantSecret(AppendGrant(AppendRecord(nil, &rec), &rec), &rec, "s3cret")))
	for i, want := range []string{"record", "", "s3cret"} {
		v, err := r.ReadValue()
		if err != nil {
			t.Fatal(err)
		}
		var got leasehold.Record
		if err := DecodeRecord(v, &got); err != nil || got.Token != 42 {
			t.Errorf("DecodeRecord %d: %+v, %v", i, got, err)
		}
		secret, err := DecodeGrant(v, &got)
		switch {
		case want == "record" && err == nil:
			t.Errorf("DecodeGrant accepted a full record")
		case want != "record" && (err != nil || secret != want || got.Token != 42):
			t.Errorf("DecodeGrant %d: %q, %v; want %q", i, secret, err, want)
		}
	}

	he := &leasehold.HeldError{Owner: "worker 7 on host a", Token: 9, Remaining: 999 * time.Microsecond, Acquired: acq}
	msg := AppendHeld(nil, he)
	err := ParseError(bytes.TrimSuffix(msg[1:], []byte("\r\n")), "n")
	var got *leasehold.HeldError
	if !errors.As(err, &got) || got.Owner != he.Owner || got.Token != 9 || got.Remaining != time.Millisecond || got.Name != "n" || !got.Acquired.Equal(acq) {
		t.Errorf("HELD round trip: %#v", err)
	}
	ie := &leasehold.InvalidError{Field: "request id", Reason: "control character U+0009 at byte 1: a: b"}
	msg = AppendInvalid(nil, ie)
	err = ParseError(bytes.TrimSuffix(msg[1:], []byte("\r\n")), "n")
	var gotIE *leasehold.InvalidError
	if !errors.As(err, &gotIE) || *gotIE != *ie {
		t.Errorf("INVALID round trip: %#v", err)
	}
	for in, want := range map[string]error{"NOTHELD x": leasehold.ErrNotHeld, "NOTFOUND": leasehold.ErrNotFound} {
		if err := ParseError([]byte(in), ""); err != want {
			t.Errorf("ParseError(%q) = %v", in, err)
		}
	}
	var se *ServerError
	if err := ParseError([]byte("NOPERM no"), ""); !errors.As(err, &se) || se.Code != "NOPERM" || se.Msg != "NOPERM no" {
		t.Errorf("ParseError(NOPERM) = %#v", err)
	}
	if err := ParseError([]byte("HELD 1 x 3 o"), ""); !errors.As(err, &se) {
		t.Errorf("malformed HELD: %#v", err)
	}
}

// FuzzReader: no input makes the reader panic, hang or allocate without
// bound, and what it accepts as a command encodes back to the same command.
func FuzzReader(f *testing.F) {
	for _, s := range []string{
		"*1\r\n$4\r\nPING\r\n", "PING\r\n", "*2\r\n$1\r\na\r\n$-1\r\n", "*1\r\n*1\r\n:1\r\n",
		"+OK\r\n", "-ERR x\r\n", ":12\r\n", "$3\r\nabc\r\n", "*-1\r\n", "$-1\r\n",
		"*3\r\n:1\r\n$1\r\nx\r\n*2\r\n+a\r\n-b\r\n", "*1048577\r\n", "$1048577\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReader(bufio.NewReaderSize(bytes.NewReader(data), 4096))
		for i := 0; i < 100; i++ {
			args, err := r.ReadCommand()
			if err != nil {
				break
			}
			if len(args) > DefaultMaxArray {
				t.Fatalf("%d arguments", len(args))
			}
			if len(args) > 0 {
				var s []string
				for _, a := range args {
					s = append(s, string(a))
				}
				again, err := reader(string(AppendCommand(nil, s...))).ReadCommand()
				if err != nil || fmt.Sprint(strs(again)) != fmt.Sprint(s) {
					t.Fatalf("command %q does not round-trip: %q, %v", s, strs(again), err)
				}
			}
		}
		r = NewReader(bufio.NewReaderSize(bytes.NewReader(data), 4096))
		for i := 0; i < 100; i++ {
			if _, err := r.ReadValue(); err != nil {
				break
			}
		}
	})
}

// testBudget is a resp.Budget of max bytes that records what is taken.
type testBudget struct{ max, used int }

func (b *testBudget) Reserve(n int) bool {
	if b.used+n > b.max {
		return false
	}
	b.used += n
	return true
}

func (b *testBudget) Release(n int) { b.used -= n }

// TestReaderBudget: a Reader reserves its buffer from Budget as a bulk's
// header announces it, fails with ErrBudget (returning nothing) when the
// Budget refuses, and gives the bytes back after a big command and at Free.
func TestReaderBudget(t *testing.T) {
	big := strings.Repeat("b", 40<<10)
	in := string(AppendCommand(nil, "PING", big)) + "PING\r\n" + string(AppendCommand(nil, "SET", "k", big))
	b := &testBudget{max: 64 << 10}
	r := NewReader(bufio.NewReader(strings.NewReader(in)))
	r.Budget = b
	args, err := r.ReadCommand()
	if err != nil || len(args) != 2 || string(args[1]) != big {
		t.Fatalf("first command: %d args, %v", len(args), err)
	}
	// A buffer's first budgetKeep bytes are not counted.
	if b.used < len(big)-budgetKeep || b.used > b.max {
		t.Fatalf("reserved %d bytes for a command of %d (its first %d not counted)", b.used, len(big), budgetKeep)
	}
	if args, err := r.ReadCommand(); err != nil || len(args) != 1 {
		t.Fatalf("second command: %q, %v", args, err)
	}
	if b.used > budgetKeep {
		t.Fatalf("after a small command %d bytes are still reserved (keeps at most %d)", b.used, budgetKeep)
	}
	b.max = b.used + 20<<10 // less than the third command's bulk less the uncounted budgetKeep
	if args, err := r.ReadCommand(); !errors.Is(err, ErrBudget) || args != nil {
		t.Fatalf("command over the budget: %d args, %v (want ErrBudget)", len(args), err)
	}
	r.Free()
	if b.used != 0 {
		t.Fatalf("after Free %d bytes are still reserved", b.used)
	}
}
