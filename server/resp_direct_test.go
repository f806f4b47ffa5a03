package server

import (
	"bufio"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/wire/resp"
)

// TestRESPDirectAnswersWhenDurable: over RESP, an acquire and a release
// that the reader starts itself (the engine answers them from its log's
// commit: asyncBackend) are answered only once durable, in the order sent
// with the commands pipelined behind them on the same name and on
// others; a bad one is refused and changes nothing.
func TestRESPDirectAnswersWhenDurable(t *testing.T) {
	e, stick, unstick := stuckEngine(t)
	srv, addr := rtServe(t, e, RESPOptions{})
	if srv.async == nil {
		t.Fatal("the engine is not served through its callbacks")
	}
	c := rtDial(t, addr)
	replies := make(chan string, 16)
	go func() {
		rd := resp.NewReader(bufio.NewReader(c.nc))
		for {
			v, err := rd.ReadValue()
			if err != nil {
				close(replies)
				return
			}
			replies <- rtShow(v)
		}
	}()
	stick()
	var b []byte
	for _, cmd := range [][]string{
		{"LH.ACQUIRE", "d/1", "a", "60000"},
		{"LH.ACQUIRE", "d/1", "b", "60000"}, // the same name: after a's, refused
		{"LH.ACQUIRE", "d/2", "a", "60000"},
		{"LH.ACQUIRE", "d/3", "a", "-5"}, // bad: refused, nothing granted
		{"LH.RELEASE", "d/2", "a", "1"},  // not d/2's token
		{"PING"},
	} {
		b = resp.AppendCommand(b, cmd...)
	}
	c.send(string(b))
	inMemory(t, e, func() bool {
		one, two := e.leases["d/1"], e.leases["d/2"]
		return one != nil && one.held && two != nil && two.held
	})
	select {
	case r := <-replies:
		t.Fatalf("a reply (%s) before the grants were durable", r)
	case <-time.After(300 * time.Millisecond):
	}
	unstick()
	want := []string{"[", "-" + resp.CodeHeld, "[", "-" + resp.CodeInvalid, "-" + resp.CodeNotHeld, "+PONG"}
	var got []string
	for range want {
		got = append(got, <-replies)
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w) {
			t.Fatalf("replies %q; want, in order, ones beginning %q", got, want)
		}
	}
	if e.leases["d/3"] != nil {
		t.Error("the bad acquire made an entry")
	}

	// A release of d/1 with its token, answered once durable.
	tok := strings.TrimPrefix(strings.Fields(strings.Trim(got[0], "[]"))[0], ":") // the grant's token
	stick()
	c.send(string(resp.AppendCommand(nil, "LH.RELEASE", "d/1", "a", tok)))
	inMemory(t, e, func() bool { return !e.leases["d/1"].held })
	select {
	case r := <-replies:
		t.Fatalf("the release answered (%s) before it was durable", r)
	case <-time.After(300 * time.Millisecond):
	}
	unstick()
	if r := <-replies; r != "+OK" {
		t.Fatalf("release: %s", r)
	}
}
