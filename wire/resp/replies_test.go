package resp

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// TestRepliesOrder: replies built concurrently, finishing in any order,
// are written in the order queued; commands with the same key run one
// after another in that order.
func TestRepliesOrder(t *testing.T) {
	pr, pw := io.Pipe()
	r := NewReplies(pw, 64, NewWorkers(), func() { t.Error("write failed") })
	go func() { r.Run(); pw.Close() }()
	const n = 500
	var mu sync.Mutex
	ran := map[string][]int{}
	go func() {
		for i := 0; i < n; i++ {
			switch {
			case i%10 == 0:
				r.Now(func(b []byte) []byte { return AppendInt(b, int64(i)) })
			default:
				key := ""
				if i%3 == 0 {
					key = fmt.Sprint("k", i%2)
				}
				r.Async(key, i%7 == 0, func(b []byte) []byte {
					time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
					if key != "" {
						mu.Lock()
						ran[key] = append(ran[key], i)
						mu.Unlock()
					}
					return AppendInt(b, int64(i))
				})
			}
		}
		if !r.Push(context.Background(), func(b []byte) []byte { return AppendInt(b, n) }) {
			t.Error("Push refused")
		}
		r.Close()
		if r.Push(context.Background(), func(b []byte) []byte { return AppendInt(b, -1) }) {
			t.Error("Push after Close succeeded")
		}
	}()
	rd := NewReader(bufio.NewReader(pr))
	for i := 0; i < n; i++ {
		v, err := rd.ReadValue()
		if err != nil || v.Int != int64(i) {
			t.Fatalf("reply %d: %v, %v", i, show(v), err)
		}
	}
	if v, err := rd.ReadValue(); err != nil || v.Int != n {
		t.Errorf("pushed reply: %v, %v", show(v), err)
	}
	if _, err := rd.ReadValue(); err != io.EOF {
		t.Errorf("after Close: %v, want EOF", err)
	}
	for key, order := range ran {
		for j := 1; j < len(order); j++ {
			if order[j] < order[j-1] {
				t.Errorf("key %s ran %v, out of order", key, order)
				break
			}
		}
	}
}

// TestRepliesDirect: a Direct command's reply, filled later from another
// goroutine, is written in its place; a Direct on a key whose earlier
// command has not finished is refused (nothing queued), and an Async on
// the key of an unfilled Direct waits for its Fill; once the connection
// has overflowed, Direct is refused.
func TestRepliesDirect(t *testing.T) {
	pr, pw := io.Pipe()
	r := NewReplies(pw, 64, NewWorkers(), func() { t.Error("write failed") })
	go func() { r.Run(); pw.Close() }()
	rd := NewReader(bufio.NewReader(pr))
	next := func(want int64) {
		t.Helper()
		if v, err := rd.ReadValue(); err != nil || v.Int != want {
			t.Fatalf("reply: %v, %v; want %d", show(v), err, want)
		}
	}

	d1, ok := r.Direct("k")
	if !ok {
		t.Fatal("Direct on a free key refused")
	}
	if _, ok := r.Direct("k"); ok {
		t.Fatal("Direct on a key with an unfilled Direct accepted")
	}
	r.Now(func(b []byte) []byte { return AppendInt(b, 2) })
	ran := make(chan struct{})
	r.Async("k", false, func(b []byte) []byte { close(ran); return AppendInt(b, 3) })
	select {
	case <-ran:
		t.Fatal("an Async ran before the unfilled Direct of its key was filled")
	case <-time.After(50 * time.Millisecond):
	}
	go d1.Fill(func(b []byte) []byte { return AppendInt(b, 1) })
	next(1)
	next(2)
	next(3)

	// An Async not yet finished holds off a Direct, on its key and on any
	// other (the Direct would take effect before it); a Direct not yet
	// filled holds off only its own key.
	release := make(chan struct{})
	r.Async("k", false, func(b []byte) []byte { <-release; return AppendInt(b, 4) })
	if _, ok := r.Direct("k"); ok {
		t.Fatal("Direct on a key with an unfinished Async accepted")
	}
	if _, ok := r.Direct("other"); ok {
		t.Fatal("Direct on another key accepted while an Async queued before it had not finished")
	}
	close(release)
	next(4)
	d5, ok := r.Direct("other")
	if !ok {
		t.Fatal("Direct on another key refused once the Async had finished")
	}
	d6, ok := r.Direct("k")
	if !ok {
		t.Fatal("Direct refused on a key of its own beside an unfilled Direct")
	}
	d6.Fill(func(b []byte) []byte { return AppendInt(b, 6) }) // filled first, written second
	d5.Fill(func(b []byte) []byte { return AppendInt(b, 5) })
	next(5)
	next(6)

	// Overflowed: Direct is refused, and a Fill pending at that moment
	// builds no reply (the command had already run).
	r.SetLimit(1, func(bool) {})
	d7, ok := r.Direct("")
	if !ok {
		t.Fatal("Direct refused before the overflow")
	}
	r.Now(func(b []byte) []byte { return AppendInt(b, 8) }) // 4 bytes: over the limit of 1
	if _, ok := r.Direct(""); ok {
		t.Fatal("Direct accepted after the overflow")
	}
	built := false
	d7.Fill(func(b []byte) []byte { built = true; return AppendInt(b, 7) })
	if built {
		t.Error("a Fill after the overflow built its reply")
	}
	r.Close()
	next(8)
}
