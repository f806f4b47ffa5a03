package resp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestLooksLikeHTTP(t *testing.T) {
	for line, want := range map[string]bool{
		"POST / HTTP/1.1":            true,
		"GET /x?y HTTP/1.0":          true,
		"OPTIONS * HTTP/1.1":         true,
		"PRI * HTTP/2.0":             true,
		"BREW /pot http/1.1":         true,
		"Host: 127.0.0.1:7071":       true,
		"host:evil.example":          true,
		"post":                       true,
		"PING":                       false,
		"GET key":                    false,
		"ECHO a HTTP/1.1":            true, // a request line in form: close rather than guess
		"LH.ACQUIRE a owner 1000":    false,
		"ECHO Host:":                 false,
		"LH.GET HTTP/1.1":            false,
		"\"GET\" / HTTP/1.1":         false, // not a method token
		"Hostname: x":                false,
		"SET host: x":                false,
		"LH.ACQUIRE POST owner 1000": false,
	} {
		args := strings.Fields(line)
		b := make([][]byte, len(args))
		for i, a := range args {
			b[i] = []byte(a)
		}
		if got := LooksLikeHTTP(b); got != want {
			t.Errorf("LooksLikeHTTP(%q) = %v, want %v", line, got, want)
		}
	}
}

// TestMaxCommand: the arguments of one command together are capped before
// they are read; one under the cap is read whole.
func TestMaxCommand(t *testing.T) {
	arg := strings.Repeat("a", 600)
	cmd := fmt.Sprintf("*3\r\n$4\r\nECHO\r\n$600\r\n%s\r\n$600\r\n%s\r\n", arg, arg)
	r := NewReader(bufio.NewReader(strings.NewReader(cmd + cmd)))
	r.MaxCommand = 1204
	if args, err := r.ReadCommand(); err != nil || len(args) != 3 {
		t.Fatalf("at the cap: %d args, %v", len(args), err)
	}
	r.MaxCommand = 1203
	if _, err := r.ReadCommand(); !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "command longer than 1203 bytes") {
		t.Errorf("over the cap: %v", err)
	}
	big := fmt.Sprintf("*3\r\n$4\r\nECHO\r\n$%d\r\n", DefaultMaxCommand)
	r = NewReader(bufio.NewReader(strings.NewReader(big)))
	r.MaxBulk = 2 * DefaultMaxCommand
	if _, err := r.ReadCommand(); !errors.Is(err, ErrProtocol) {
		t.Errorf("over the default cap: %v", err)
	}
}

// blockingWriter accepts nothing until released: a client that does not
// read.
type blockingWriter struct{ release chan struct{} }

func (w blockingWriter) Write(p []byte) (int, error) {
	<-w.release
	return 0, io.ErrClosedPipe
}

// TestRepliesLimit: once the replies not yet written pass the limit, the
// overflow callback runs once; under it, it never does.
func TestRepliesLimit(t *testing.T) {
	w := blockingWriter{release: make(chan struct{})}
	var overflows atomic.Int32
	r := NewReplies(w, 1024, NewWorkers(), func() {})
	r.SetLimit(100<<10, func(bool) { overflows.Add(1); close(w.release) })
	done := make(chan struct{})
	go func() { defer close(done); r.Run() }()
	reply := strings.Repeat("x", 10<<10)
	for i := 0; i < 30; i++ {
		r.Now(func(b []byte) []byte { return AppendBulkString(b, reply) })
	}
	r.Close()
	<-done
	if n := overflows.Load(); n != 1 {
		t.Errorf("overflow callbacks: %d, want 1", n)
	}
	if p := r.Pending(); p != 0 {
		t.Errorf("pending after Run: %d bytes", p)
	}

	var sb strings.Builder
	ok := NewReplies(&sb, 1024, NewWorkers(), func() {})
	ok.SetLimit(100<<10, func(bool) { t.Error("overflow under the limit") })
	done = make(chan struct{})
	go func() { defer close(done); ok.Run() }()
	for i := 0; i < 9; i++ { // 9 replies in all stay under the limit, however late Run writes them
		ok.Now(func(b []byte) []byte { return AppendBulkString(b, reply) })
	}
	ok.Close()
	<-done
	if sb.Len() != 9*(len(reply)+len("$10240\r\n\r\n")) {
		t.Errorf("wrote %d bytes", sb.Len())
	}
}

// TestRepliesOverflowedRunNothing (issue 26's review): once a connection
// has overflowed, the commands it still has queued are not run, so no
// reply is built for a client that will never get it (200 slow readers of
// 64 KiB replies took a server to 1.7 GB against a 256 MiB total).
func TestRepliesOverflowedRunNothing(t *testing.T) {
	w := blockingWriter{release: make(chan struct{})}
	defer close(w.release)
	r := NewReplies(w, 1024, NewWorkers(), func() {})
	var overflowed atomic.Bool
	r.SetLimit(100<<10, func(bool) { overflowed.Store(true) })
	go r.Run()
	reply := strings.Repeat("x", 10<<10)
	var ran, after atomic.Int32
	for i := 0; i < 200; i++ {
		r.Async("k", false, func(b []byte) []byte { // one key: they run in order
			ran.Add(1)
			if overflowed.Load() {
				after.Add(1)
			}
			return AppendBulkString(b, reply)
		})
	}
	r.Close()
	finished := func() bool { // the last of the key has finished
		r.orderMu.Lock()
		defer r.orderMu.Unlock()
		return len(r.lastBy) == 0
	}
	for deadline := time.Now().Add(30 * time.Second); !finished() && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if !overflowed.Load() {
		t.Fatal("no overflow with 200 replies of 10 KiB unwritten against a 100 KiB limit")
	}
	if n := after.Load(); n != 0 {
		t.Errorf("%d commands ran after the overflow (%d in all), want 0", n, ran.Load())
	}
	if n := ran.Load(); n > 12 {
		t.Errorf("%d commands ran, want at most the 11 or so that fit in the limit", n)
	}
}

// TestInlineLimitBelowBuffer: with MaxInline below the buffer's size (the
// server's 1 KiB before AUTH), a line without its end is refused once
// MaxInline+2 bytes have come, without waiting for more; pipelined short
// lines on a connection that stays open are read at once (an earlier
// version waited for one byte more than was buffered, and hung).
func TestInlineLimitBelowBuffer(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	rd := NewReader(bufio.NewReaderSize(pr, 16<<10))
	rd.MaxInline = 1024
	go io.WriteString(pw, "A 1\r\nB 2\r\n") // and nothing more for now, not even EOF
	type res struct {
		args string
		err  error
	}
	got := make(chan res, 3)
	go func() {
		for range 3 {
			args, err := rd.ReadCommand()
			got <- res{fmt.Sprintf("%q", args), err} // args share the reader's buffer
			if err != nil {
				return
			}
		}
	}()
	for i, want := range []string{"A 1", "B 2"} {
		select {
		case r := <-got:
			if r.err != nil || r.args != fmt.Sprintf("%q", strings.Fields(want)) {
				t.Fatalf("command %d: %s, %v; want %q", i, r.args, r.err, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("command %d (%q) not read in 10 s although it is buffered whole", i, want)
		}
	}
	go io.WriteString(pw, strings.Repeat("x", 1100)) // and nothing more
	select {
	case r := <-got:
		var pe *ProtocolError
		if !errors.As(r.err, &pe) || !strings.Contains(r.err.Error(), "longer than 1024") {
			t.Errorf("1,100 bytes without a line end: %v, want a protocol error", r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("1,100 bytes without a line end: still waiting for more")
	}
}
